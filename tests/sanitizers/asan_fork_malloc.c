// The AddressSanitizer limitation behind finding A3 (tests/sanitizers/KNOWN.md), shown without
// DeepContext: one thread lists a directory in a loop (opendir mallocs a 32 KB buffer) while
// the main thread forks children that list a directory too. glibc's malloc locks its arenas
// around fork, so without ASan every child exits; GCC 12's ASan allocator does not, so a child
// forked while the lister held that size class's lock waits for it forever.
//
//   gcc -O1 tests/sanitizers/asan_fork_malloc.c -o /tmp/fork_malloc -pthread
//   /tmp/fork_malloc                                              -> children hung: 0 of 200
//   LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 /tmp/fork_malloc
//                                                                 -> children hung: 3 of 200 (one run)
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void list_once(void) {
  DIR* d = opendir("/proc/self/task");
  if (d != NULL) {
    while (readdir(d) != NULL) {
    }
    closedir(d);
  }
}

static void* lister(void* arg) {
  (void)arg;
  for (;;) list_once();
  return NULL;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, NULL, lister, NULL);
  int hung = 0;
  for (int i = 0; i < 200; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      list_once();
      _exit(0);
    }
    int status, done = 0;
    for (int ms = 0; ms < 3000 && !done; ++ms) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        done = 1;
      } else {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
      }
    }
    if (!done) {
      ++hung;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  printf("children hung: %d of 200\n", hung);
  return 0;
}
