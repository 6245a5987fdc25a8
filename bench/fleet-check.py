# Checks a simulated fleet's report (bench/coordinator-memory.sh, bench/coordinator-fanin.sh):
# exactly N timeline rows, each with every worker's requests (workers x 10 commands x per
# interval), no late intervals, books that balance; with a window (first and last row
# read, and the wall clock at each), at least 10 rows of it at 0.9-1.1 s each. Prints "ok"
# or "NOT MEASURED: why".
#
#   python3 bench/fleet-check.py REPORT WORKERS N PER_INTERVAL [R0 R1 T0 T1]
import json, os, sys

if not os.path.exists(sys.argv[1]):
    print("NOT MEASURED: the run wrote no report"); sys.exit()
r = json.load(open(sys.argv[1]))
w, n = int(sys.argv[2]), int(sys.argv[3])
per = w * 10 * int(sys.argv[4])
rows = r["timeline"]
bad = []
if len(rows) != n: bad.append(f"{len(rows)} rows, not {n}")
short = [p["t_s"] for p in rows if p["scheduled"] != per]
if short: bad.append(f"{len(short)} rows without every worker's {per} requests (first at {short[0]} s)")
if r["checks"]["late_intervals"]: bad.append(f'{r["checks"]["late_intervals"]} late intervals')
if not r["checks"]["intervals_match_totals"]: bad.append("; ".join(r["checks"]["problems"][:3]))
if r["totals"]["scheduled"] != per * n: bad.append(f'totals {r["totals"]["scheduled"]} != {per * n}')
if len(sys.argv) > 5:
    r0, r1, t0, t1 = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8])
    if r1 - r0 < 10: bad.append(f"a window of {r1 - r0} rows")
    elif not 0.9 <= (t1 - t0) / (r1 - r0) <= 1.1: bad.append(f"{(t1 - t0) / (r1 - r0):.2f} s per row in the window")
print("ok" if not bad else "NOT MEASURED: " + "; ".join(bad))
