import sys

data = sys.stdin.read()
print("stdout:" + data.strip().upper())
print("stderr-line", file=sys.stderr)
sys.exit(int(sys.argv[1]))
