#!/usr/bin/python3
"""docs_commands.py ROOT: every command line the user documentation shows for the tools is
one the tools take.

The pages (README.md, docs/deployment.md, docs/gpu.md, docs/performance.md and the man
pages) show `sparsecommd`, `sparsectl`, `sparsecomm-run` and `sparsecomm-bench` command
lines in code blocks and in `inline code`. For each one this checks, against the tools'
own --help texts (the built binaries in ROOT/build/bin):
- each --option of sparsecomm-run, sparsectl and a sparsecomm-bench command is in that
  tool's (command's) --help, and a sparsecomm-bench command and a sparsectl command
  exist;
- each --KEY given to sparsecommd, directly or through `sparsecomm-run --daemon-arg`, is
  a key or an option of `sparsecommd --help` (dashes and underscores alike);
- each horovodrun flag that sparsecomm-run is documented to accept is accepted, and each
  one it is documented to refuse exits 2 naming it;
- sparsectl exits 2 on a usage error and 1 on a daemon it cannot reach, as sparsectl(1)
  says, with no daemon running.
Prints ok/FAIL per page and tool and ends with "N passed, N failed".
"""
import os
import re
import shlex
import subprocess
import sys

PAGES = ["README.md", "docs/deployment.md", "docs/gpu.md", "docs/performance.md",
         "man/sparsecommd.8", "man/sparsectl.1"]
TOOLS = ("sparsecomm-bench", "sparsecomm-run", "sparsectl", "sparsecommd")


def help_text(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return p.stdout + p.stderr


def options_in(text):
    """Every --option (and -x) a help text names."""
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


def command_lines(path):
    """The command lines of a page: its code blocks (a line ending in a backslash joined to
    the next) and its inline code spans, man-page escapes removed."""
    text = open(path, encoding="utf-8").read()
    if path.endswith((".1", ".8")):
        text = re.sub(r"\\f[BIRP]|\\c", "", text).replace("\\-", "-")
        text = "\n".join(ln for ln in text.splitlines() if not ln.startswith("."))
    lines = []
    block, pending = False, ""
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            block = not block
            continue
        code = block or raw.startswith("    ") or path.endswith((".1", ".8"))
        if code:
            line = pending + raw.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            lines.append(line)
        for span in re.findall(r"`([^`]+)`", raw):
            lines.append(span)
    return [ln for ln in lines if any(t in ln for t in TOOLS)]


def words(line):
    line = line.split(" #", 1)[0]  # a shell comment
    try:
        return shlex.split(line, posix=True)
    except ValueError:
        return line.split()


class Checker:
    def __init__(self, root):
        b = os.path.join(root, "build", "bin")
        self.bin = b
        self.daemon = {o.replace("-", "_") for o in options_in(
            help_text([b + "/sparsecommd", "--help"])) if o.startswith("--")}
        self.run = options_in(help_text([b + "/sparsecomm-run", "--help"]))
        ctl = help_text([b + "/sparsectl", "--help"])
        self.ctl = options_in(ctl)
        self.ctl_cmds = set(re.findall(r"^  ([a-z]+)(?: |$)", ctl, re.M))
        top = help_text([b + "/sparsecomm-bench", "--help"])
        self.bench_cmds = set(re.findall(r"^  ([a-z0-9_]+)\s", top, re.M))
        self.bench = {}

    def bench_opts(self, cmd):
        if cmd not in self.bench:
            self.bench[cmd] = options_in(help_text([self.bin + "/sparsecomm-bench", cmd,
                                                    "--help"]))
        return self.bench[cmd]

    def daemon_flag(self, w):
        return w.replace("-", "_") in self.daemon or w in ("--config",)

    def check(self, ws, errs):
        """The words of one command line; appends what is wrong to errs."""
        for i, w in enumerate(ws):
            tool = os.path.basename(w)
            if tool not in TOOLS:
                continue
            rest = ws[i + 1:]
            if tool == "sparsecomm-run":
                self.check_run(rest, errs)
            elif tool == "sparsecomm-bench":
                self.check_bench(rest, errs)
            elif tool == "sparsectl":
                self.check_ctl(rest, errs)
            else:
                for a in rest:
                    if a.startswith("--") and not self.daemon_flag(a):
                        errs.append("sparsecommd: no option %s" % a)

    def check_run(self, rest, errs):
        j = 0
        while j < len(rest):
            a = rest[j]
            if a == "--" or not a.startswith("-") or a in ("-", "--tether"):
                return
            if a == "--daemon-arg" and j + 1 < len(rest):
                d = rest[j + 1]
                if d.startswith("--") and not self.daemon_flag(d):
                    errs.append("sparsecomm-run --daemon-arg %s: no such daemon option" % d)
                j += 2
                continue
            if a not in self.run and a.split("=")[0] not in self.run:
                errs.append("sparsecomm-run: no option %s" % a)
            j += 1

    def check_bench(self, rest, errs):
        if not rest or rest[0].startswith("-"):
            return
        cmd = rest[0].rstrip(";")
        if cmd.isupper():  # a placeholder: sparsecomm-bench COMMAND
            return
        if cmd not in self.bench_cmds:
            errs.append("sparsecomm-bench: no command %s" % cmd)
            return
        opts = self.bench_opts(cmd)
        for a in rest[1:]:
            if a.startswith("[") or a.endswith(";"):
                a = a.strip("[];")
            if a.startswith("--") and a not in opts:
                errs.append("sparsecomm-bench %s: no option %s" % (cmd, a))

    def check_ctl(self, rest, errs):
        if rest[:1] == ["-"]:  # a man page's NAME line
            return
        cmd = None
        for a in rest:
            if a.startswith("-"):
                if a not in self.ctl:
                    errs.append("sparsectl: no option %s" % a)
            elif cmd is None:
                cmd = a
                if a.isidentifier() and a.islower() and a not in self.ctl_cmds:
                    errs.append("sparsectl: no command %s" % a)


def man_options(root, checker):
    """The options of the man pages' SYNOPSIS and OPTIONS sections are the tools' own."""
    errs, n = [], 0
    for page, known, norm in (("man/sparsectl.1", checker.ctl, lambda o: o),
                              ("man/sparsecommd.8", checker.daemon,
                               lambda o: o.replace("-", "_"))):
        text = open(os.path.join(root, page), encoding="utf-8").read()
        for sec in re.split(r"^\.SH ", text, flags=re.M):
            if not sec.startswith(("SYNOPSIS", "OPTIONS")):
                continue
            for o in re.findall(r"\\-\\-([a-z][\w\\-]*)", sec):
                o = "--" + o.replace("\\-", "-").rstrip("-")
                n += 1
                if norm(o) not in known and norm(o) != norm("--KEY"):
                    errs.append("%s: %s is not in the tool's --help" % (page, o))
    return n, errs


def ctl_exit_statuses(checker):
    """sparsectl(1)'s exit status: 2 on a usage error, also with no daemon to reach (the
    command's shape is checked first); 1 when the daemon cannot be reached."""
    ctl = os.path.join(checker.bin, "sparsectl")
    nowhere = ["--socket", "/nonexistent/sparsecomm/ctl.sock"]
    cases = [(["bogus"], 2), (["config", "set", "scheme"], 2), (["timeline", "start"], 2),
             (["status", "extra"], 2), (["--json", "stats", "now"], 2), ([], 2),
             (["status"], 1), (["config", "get", "scheme"], 1)]
    errs = []
    for args, want in cases:
        p = subprocess.run([ctl] + nowhere + args, capture_output=True, text=True,
                           timeout=30)
        if p.returncode != want:
            errs.append("sparsectl %s with no daemon: exit %d, not %d: %s" % (
                " ".join(args), p.returncode, want, (p.stdout + p.stderr).strip()[:120]))
    return len(cases), errs


def horovod_flags(root, checker):
    """The README's horovodrun flags: the accepted ones run, the refused ones exit 2."""
    text = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    sec = text.split("### Coming from Horovod", 1)[1].split("\n### ", 1)[0]
    table = sec.split("horovodrun's other flags", 1)[0]
    accepted = set(re.findall(r"^\| `(--[a-z-]+)", table, re.M))
    accepted |= set(re.findall(r"^\| `--[a-z-]+`, `(--[a-z-]+)`", table, re.M))
    refused = sec.split("horovodrun's other flags", 1)[1].split("The daemons read", 1)[0]
    refused = {f for f in re.findall(r"`(--?[a-z][a-z-]*)", refused)
               if not f.endswith("-") and f not in ("--rsh-agent", "--verbose", "-v")}
    errs = []
    run = os.path.join(checker.bin, "sparsecomm-run")
    hostfile = os.path.join(os.environ.get("TMPDIR", "/tmp"), "docs_commands.%d.hosts"
                            % os.getpid())
    with open(hostfile, "w") as f:
        f.write("localhost slots=1\n")
    values = {"--start-timeout": "30", "--fusion-threshold-mb": "8", "--cycle-time-ms": "1",
              "--timeline-filename": "/nonexistent/t.json", "--log-level": "INFO",
              "--stall-check-shutdown-time-seconds": "30", "--cache-capacity": "64",
              "--hostfile": hostfile}
    for f in sorted(accepted):
        argv = [run, "-np", "1", f] + ([values[f]] if f in values else []) + ["--help"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            errs.append("horovodrun's %s, documented as accepted: exit %d: %s"
                        % (f, p.returncode, (p.stdout + p.stderr).strip()[:200]))
    for f in sorted(refused):
        p = subprocess.run([run, "-np", "1", f, "x", "true"], capture_output=True,
                           text=True, timeout=30)
        if p.returncode != 2 or f not in p.stderr:
            errs.append("horovodrun's %s, documented as refused: exit %d: %s"
                        % (f, p.returncode, (p.stdout + p.stderr).strip()[:200]))
    os.unlink(hostfile)
    return len(accepted) + len(refused), errs


def report(what, errs, counts):
    """One check's line: ok WHAT, or FAIL with its errors; counts is [passed, failed]."""
    if errs:
        counts[1] += 1
        print("FAIL  docs: %s: %s" % (what, "; ".join(sorted(set(errs)))))
    else:
        counts[0] += 1
        print("ok    docs: " + what)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    checker = Checker(root)
    counts = [0, 0]
    for page in PAGES:
        path = os.path.join(root, page)
        if not os.path.exists(path):
            continue
        errs, n = [], 0
        for line in command_lines(path):
            n += 1
            checker.check(words(line), errs)
        report("%s's %d command lines take only options the tools have" % (page, n), errs,
               counts)
    n, errs = man_options(root, checker)
    report("the man pages' %d options are in the tools' --help" % n, errs, counts)
    n, errs = ctl_exit_statuses(checker)
    report("sparsectl's %d exit statuses as sparsectl(1) says" % n, errs, counts)
    n, errs = horovod_flags(root, checker)
    report("README's %d horovodrun flags accepted or refused as it says" % n, errs, counts)
    print("%d passed, %d failed" % tuple(counts))
    return 1 if counts[1] else 0


if __name__ == "__main__":
    sys.exit(main())
