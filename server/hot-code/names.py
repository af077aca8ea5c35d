"""Names for functions.txt, for record.sh: the functions whose code ran, read off the shipped
build itself (its addresses, through the linker's map of where each function's section went).

  names.py callgrind WORK   every instruction callgrind saw run in WORK/talaria (a build with
                            no list: valgrind places only `.text`) → WORK/ran.txt
  names.py faults WORK      code that faulted in outside `.text.hot` in WORK/perf.*.data
                            (`perf record -e page-faults -d`), not listed yet → appended to
                            WORK/ran.txt; exits 1 when there was none new
  names.py write WORK OUT   WORK/ran.txt as the list: each name with what varies between
                            builds as `*` (patterns.rs's without_hashes), sorted, unique

WORK/map is the linker's map of WORK/talaria (`TALARIA_LINK_MAP`, server/build.rs).
"""
import bisect
import glob
import re
import struct
import subprocess
import sys


def without_hashes(name):
    name = re.sub(r"\.\d+$", ".*", name)
    if name.startswith("_ZN"):
        return re.sub(r"17h[0-9a-fA-F]{16}E", "17h*E", name)
    if name.startswith("_R"):
        return re.sub(r"B[0-9A-Za-z]*_", "B*_", re.sub(r"Cs[0-9A-Za-z]*_", "Cs*_", name))
    return name


# lld's map: `VMA LMA Size Align Out In Symbol`; an input section's line ends `file:(name)`.
SECTION = re.compile(r"^\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s+\S.*:\((\.text\.[^)]*)\)$")
PREFIX = re.compile(r"^\.text\.(unlikely\.|startup\.|hot\.)?")


class Sections:
    """Each function's section in the map, by address."""

    def __init__(self, path):
        rows = sorted(
            (int(m[1], 16), int(m[2], 16), PREFIX.sub("", m[3]))
            for m in map(SECTION.match, open(path, errors="replace"))
            if m
        )
        self.starts = [row[0] for row in rows]
        self.rows = rows

    def function_at(self, address):
        at = bisect.bisect_right(self.starts, address) - 1
        if at >= 0 and address < self.rows[at][0] + self.rows[at][1]:
            return self.rows[at][2]
        return None


def ran_under_callgrind(work, sections):
    agent = f"{work}/talaria"
    ran = set()
    for path in glob.glob(f"{work}/callgrind.*"):
        obj = None
        for line in open(path, errors="replace"):
            if line.startswith("ob="):
                obj = line[3:].strip()
            elif obj == agent and line.startswith("0x"):
                name = sections.function_at(int(line.split()[0], 16))
                if name:
                    ran.add(name)
    return ran


def load_segments(binary):
    """(file offset, address, size) of each PT_LOAD of a 64-bit little-endian ELF file."""
    data = open(binary, "rb").read()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    size, count = struct.unpack_from("<HH", data, 0x36)
    segments = []
    for index in range(count):
        kind, _, offset, address, _, filesz = struct.unpack_from("<IIQQQQ", data, phoff + index * size)
        if kind == 1:
            segments.append((offset, address, filesz))
    return segments


# perf script's `addr sym (dso) ip sym (dso)`: a fault on code has its address at the ip.
FAULT = re.compile(r"^\s*([0-9a-f]+)\s+\S+\s+\(([^)]*)\)\s+([0-9a-f]+)\s")
MMAP = re.compile(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+|\d+) .*r-xp (\S+)")


def faulted_natively(work, sections):
    agent = f"{work}/talaria"
    segments = load_segments(agent)
    faulted = set()
    for path in glob.glob(f"{work}/perf.*.data"):
        out = subprocess.run(
            ["perf", "script", "-i", path, "-F", "addr,ip,sym,dso", "--no-demangle", "--show-mmap-events"],
            capture_output=True, text=True,
        ).stdout
        base = None
        for line in out.splitlines():
            mapped = MMAP.search(line)
            if mapped and mapped[4] == agent:
                base = int(mapped[1], 16) - int(mapped[3], 0)
            fault = FAULT.match(line)
            if not fault or base is None or fault[1] != fault[3] or fault[2] != agent:
                continue
            offset = int(fault[1], 16) - base
            for start, address, size in segments:
                if start <= offset < start + size:
                    name = sections.function_at(address + offset - start)
                    if name:
                        faulted.add(name)
    return faulted


def main():
    command, work = sys.argv[1], sys.argv[2]
    listed_path = f"{work}/ran.txt"
    if command == "callgrind":
        ran = ran_under_callgrind(work, Sections(f"{work}/map"))
        open(listed_path, "w").write("".join(f"{name}\n" for name in sorted(ran)))
        print(f"{len(ran)} functions ran under callgrind", file=sys.stderr)
    elif command == "faults":
        listed = {without_hashes(line.strip()) for line in open(listed_path)}
        faulted = faulted_natively(work, Sections(f"{work}/map"))
        new = sorted(n for n in faulted if without_hashes(n) not in listed)
        open(listed_path, "a").write("".join(f"{name}\n" for name in new))
        print(f"{len(new)} more functions faulted in natively: {new[:3]}", file=sys.stderr)
        sys.exit(0 if new else 1)
    elif command == "write":
        names = sorted({without_hashes(line.strip()) for line in open(listed_path) if line.strip()})
        open(sys.argv[3], "w").write("".join(f"{name}\n" for name in names))
        print(f"{len(names)} names written to {sys.argv[3]}", file=sys.stderr)


main()
