"""Names for functions.txt, for record.sh: the functions whose code ran in WORK/talaria, a
release build with its symbols kept (TALARIA_KEEP_SYMBOLS: the same code as shipped).

  names.py callgrind WORK   the functions callgrind saw run (a build with no list: valgrind
                            names only code in `.text`) → WORK/ran.txt
  names.py faults WORK      functions whose code faulted in natively (WORK/perf.*.data,
                            `perf record -e page-faults -d`), not listed yet → appended to
                            WORK/ran.txt; exits 1 when there was none new
  names.py write WORK OUT   WORK/ran.txt as the list: each name with what varies between
                            builds as `*` (patterns.rs's without_hashes), sorted, unique
"""
import glob
import re
import subprocess
import sys


def without_hashes(name):
    name = re.sub(r"\.\d+$", ".*", name)
    if name.startswith("_ZN"):
        return re.sub(r"17h[0-9a-fA-F]{16}E", "17h*E", name)
    if name.startswith("_R"):
        return re.sub(r"B[0-9A-Za-z]*_", "B*_", re.sub(r"Cs[0-9A-Za-z]*_", "Cs*_", name))
    return name


def functions_defined(work):
    out = subprocess.run(["nm", f"{work}/talaria"], capture_output=True, text=True).stdout
    return {p[2] for p in (line.split() for line in out.splitlines()) if len(p) == 3 and p[1] in "tTwW"}


def ran_under_callgrind(work):
    agent = f"{work}/talaria"
    ran = set()
    for path in glob.glob(f"{work}/callgrind.*"):
        obj = None
        for line in open(path, errors="replace"):
            if line.startswith("ob="):
                obj = line[3:].strip()
            elif line.startswith("fn=") and obj == agent:
                ran.add(re.sub(r"'\d+$", "", line[3:].strip()))
    return ran & functions_defined(work)


# perf script's `addr sym (dso) ip sym (dso)`: a fault on code has its address at the ip.
FAULT = re.compile(r"^\s*([0-9a-f]+)\s+(\S+)\s+\(([^)]*)\)\s+([0-9a-f]+)\s")


def faulted_natively(work):
    agent = f"{work}/talaria"
    faulted = set()
    for path in glob.glob(f"{work}/perf.*.data"):
        out = subprocess.run(
            ["perf", "script", "-i", path, "-F", "addr,ip,sym,dso", "--no-demangle"],
            capture_output=True, text=True,
        ).stdout
        for line in out.splitlines():
            fault = FAULT.match(line)
            if fault and fault[1] == fault[4] and fault[3] == agent:
                faulted.add(fault[2])
    return faulted & functions_defined(work)


def main():
    command, work = sys.argv[1], sys.argv[2]
    listed_path = f"{work}/ran.txt"
    if command == "callgrind":
        ran = ran_under_callgrind(work)
        open(listed_path, "w").write("".join(f"{name}\n" for name in sorted(ran)))
        print(f"{len(ran)} functions ran under callgrind", file=sys.stderr)
        sys.exit(0 if ran else 1)
    elif command == "faults":
        listed = {without_hashes(line.strip()) for line in open(listed_path)}
        new = sorted(n for n in faulted_natively(work) if without_hashes(n) not in listed)
        open(listed_path, "a").write("".join(f"{name}\n" for name in new))
        print(f"{len(new)} more functions faulted in natively: {new[:3]}", file=sys.stderr)
        sys.exit(0 if new else 1)
    elif command == "write":
        names = sorted({without_hashes(line.strip()) for line in open(listed_path) if line.strip()})
        open(sys.argv[3], "w").write("".join(f"{name}\n" for name in names))
        print(f"{len(names)} names written to {sys.argv[3]}", file=sys.stderr)


main()
