/* A library with thread-local storage whose constructor computes a while, then allocates:
 * loading it bumps glibc's TLS generation, and most of its constructor's time is in malloc. A
 * thread sampled there, whose next TLS access must grow its DTV (realloc), waited on the arena
 * lock it held itself. */
#include <stdlib.h>
#include <string.h>

__thread char dcn_tls_block[4096];
static void* dcn_kept[64];
static volatile unsigned dcn_sum;

__attribute__((constructor)) static void dcn_init_allocating(void) {
  /* Its own code first (samples here must keep their native frames), its TLS touched last. */
  for (unsigned i = 0; i < 400000; ++i) dcn_sum += i * 2654435761u;
  for (int round = 0; round < 400; ++round)
    for (int k = 0; k < 64; ++k) {
      free(dcn_kept[k]);
      dcn_kept[k] = malloc(16 + (size_t)(k * 37 + round) % 3000);
      memset(dcn_kept[k], 1, 16);
    }
  dcn_tls_block[0] = 1;
}
