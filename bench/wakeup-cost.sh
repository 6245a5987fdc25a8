#!/usr/bin/env bash
# Measures what one sleep/wake-up cycle of a thread costs in CPU time on this machine
# (the floor under any pacer that wakes once per request). A C program sleeps 50 µs
# 20,000 times with 1 µs timer slack and reports CPU (user + sys) per cycle.
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/sl.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/prctl.h>
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  long ns = atol(argv[1]); int n = atoi(argv[2]);
  prctl(PR_SET_TIMERSLACK, 1000);
  struct timespec ts = {0, ns};
  double t0 = now();
  for (int i=0;i<n;i++) clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
  double el = now()-t0;
  struct rusage ru; getrusage(RUSAGE_SELF,&ru);
  double cpu = ru.ru_utime.tv_sec+ru.ru_utime.tv_usec/1e6+ru.ru_stime.tv_sec+ru.ru_stime.tv_usec/1e6;
  /* The window must hold every sleep: a wall time under n x ns means they did not happen. */
  if (el < n * (ns / 1e9)) { fprintf(stderr, "wakeup-cost: %d sleeps took %.3f s < %.3f s; no figure\n", n, el, n * (ns / 1e9)); return 1; }
  printf("sleep %ld ns x %d: CPU %.2f us per cycle, wall %.1f us per cycle (overshoot %.1f us)\n",
         ns, n, cpu/n*1e6, el/n*1e6, el/n*1e6 - ns/1e3);
  return 0;
}
C
gcc -O2 -o "$tmp/sl" "$tmp/sl.c"
taskset -c "${CPU:-1}" "$tmp/sl" 50000 20000
