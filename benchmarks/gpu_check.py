"""The prepared GPU check: every check of learngene's CUDA path in one command, within a fixed time, writing a
summary and its logs to one folder. ``benchmarks/gpu_check.sh OUTDIR`` runs it (docs/results/gpu-profile.md says
how and what each stage does). No stage stops another: each has its own time limit, and its failure is one line of
the summary. The summary is rewritten after every stage, so a run killed part-way still leaves what it measured.

Stages, in this order: the speed numbers first (they need an idle machine); then the suite in the background, on
the CPU, while the GPU tests, the torchrun check and the demo run in the foreground; last the ViT-B compile, once
the suite is done (the stage a rerun most easily gives alone):

    env            nvidia-smi, versions (torch, CUDA, cuDNN, timm, transformers, triton), C compiler, commit, date
    speed-eager    benchmarks/gpu_speed.py, ViT-S/16 and ViT-B/16, 224 px, batch 256, bf16: plain timm vs ours
    compile-vit-s  the same with --compile, ViT-S/16 (plain and ancestry steps: the aux net compiles its own graph)
    suite          pytest -m "not gpu" -n WORKERS --dist loadscope: the rest of the suite, with the GPU visible
    gpu-tests      pytest -m gpu tests/test_gpu.py, recording what each comparison measured
    torchrun       benchmarks/gpu_check_torchrun.py: condense under torchrun with NCCL, SIGKILL, --resume, bit-exact
    demo           learngene demo --quick --device cuda (Fashion-MNIST; without it: bench --profile gpu-smoke)
    compile-vit-b  the ViT-S/16 compile stage for ViT-B/16

Without CUDA every stage that needs it says so in one line and, where one exists, runs a CPU stand-in that
exercises the stage's own code (small sizes, --device cpu, or the command's one-line refusal).

Settings (environment): GIT_COMMIT (else a COMMIT file, else git), GPU_CHECK_BUDGET (seconds for everything;
default 470 with CUDA, 1800 without), GPU_CHECK_STAGES (comma list: only these, e.g. for a rerun),
GPU_CHECK_WORKERS (the suite's pytest-xdist workers; default 14), GPU_CHECK_SUITE_ARGS (more pytest arguments for
the suite, e.g. some test files, ``-k EXPR`` or ``--dist load``), LEARNGENE_DATA (Fashion-MNIST's folder).

Failures: each pytest stage appends every failure and error, as it happens, to OUTDIR/<stage>-failures.log
(benchmarks/gpu_check_report.py, a pytest plugin), and the summary names the most common errors; a stage at its time
limit is first sent SIGINT, so that pytest still prints its counts. The torchrun stage shows every line of its runs'
logs that names an error.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpu_check_report import common_errors  # benchmarks/, this file's folder

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
STAGES = ("env", "speed-eager", "compile-vit-s", "suite", "gpu-tests", "torchrun", "demo", "compile-vit-b")
LIMITS = {  # seconds; every stage also stops at the check's deadline
    "env": 60,
    "speed-eager": 120,
    "compile-vit-s": 110,
    "compile-vit-b": 130,
    "suite": 300,
    "gpu-tests": 180,
    "torchrun": 120,
    "demo": 120,
}
MIN_SECONDS = {"speed-eager": 40, "compile-vit-s": 60, "compile-vit-b": 70}  # else skipped: too little to finish
SPEED_ARGS = ["--batch-size", "256", "--steps", "10", "--warmup", "3"]
SPEED_RUNS = {  # stage: gpu_speed.py's arguments besides SPEED_ARGS
    "speed-eager": ["--reps", "2"],
    "compile-vit-s": ["--compile", "--kinds", "plain", "ancestry", "--reps", "1", "--sizes", "ViT-S/16"],
    "compile-vit-b": ["--compile", "--kinds", "plain", "ancestry", "--reps", "1", "--sizes", "ViT-B/16"],
}
FASHION_MNIST = ("data/fashion-mnist", "/usr/share/datasets/fashion-mnist")  # after $LEARNGENE_DATA
ENV_PROBE = r"""
import json, os, platform, shutil
info = {"python": platform.python_version(), "cpus": os.cpu_count()}
for mod in ("torch", "torchvision", "timm", "transformers", "safetensors", "numpy", "sklearn", "triton", "pytest",
            "xdist", "hypothesis"):
    try:
        info[mod] = getattr(__import__(mod), "__version__", "?")
    except Exception as exc:
        info[mod] = f"missing ({type(exc).__name__})"
import torch
info["cuda_build"], info["cuda"] = torch.version.cuda, torch.cuda.is_available()
info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
if info["cuda"]:
    props = torch.cuda.get_device_properties(0)
    info.update(device=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(),
                capability="%d.%d" % torch.cuda.get_device_capability(0), memory_gib=round(props.total_memory / 2**30, 1),
                bf16=torch.cuda.is_bf16_supported())
info["c_compiler"] = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
print(json.dumps(info))
"""


@dataclass
class Result:
    stage: str
    status: str  # passed, failed, timed out, skipped, running
    seconds: float
    line: str


@dataclass
class Check:
    out: Path
    work: Path
    deadline: float
    cuda: bool | None = None  # None until the env stage has looked
    results: list[Result] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    speed: list[dict] = field(default_factory=list)
    measured: list[dict] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def record(self, result: Result) -> None:
        self.results = [r for r in self.results if r.stage != result.stage] + [result]
        self.write_summary()

    # ---- running commands -------------------------------------------------------------------------------------
    def start(self, cmd: list[str], log: str, env: dict | None = None) -> tuple[subprocess.Popen, float]:
        """Start ``cmd`` with its output appended to ``log``; the process and when it started."""
        with open(self.out / log, "a") as fh:
            fh.write(f"\n===== {datetime.datetime.now(datetime.UTC):%H:%M:%S} $ {' '.join(cmd)}\n")
            fh.flush()
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env={**self.base_env(), **(env or {})},
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a time-out stops the command and all it started
            )
        return proc, time.monotonic()

    def finish(self, proc: subprocess.Popen, since: float, limit: float, log: str) -> tuple[int | None, float]:
        """Wait for ``proc`` at most ``limit`` seconds from ``since``; the exit code (None: timed out), and seconds."""
        try:
            code: int | None = proc.wait(timeout=max(1.0, since + limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
            # SIGINT to the command alone first, as Ctrl-C: pytest (and its xdist workers, through it) stops and
            # prints its counts; then the whole process group, in case it did not stop
            for sig, grace, group in (
                (signal.SIGINT, 15, False),
                (signal.SIGTERM, 10, True),
                (signal.SIGKILL, 10, True),
            ):
                try:
                    os.killpg(proc.pid, sig) if group else os.kill(proc.pid, sig)
                    proc.wait(timeout=grace)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
            with open(self.out / log, "a") as fh:
                fh.write(f"\n===== stopped after {limit:.0f} s (the stage's time limit)\n")
        return code, time.monotonic() - since

    def run(self, cmd: list[str], log: str, limit: float, env: dict | None = None) -> tuple[int | None, float]:
        proc, since = self.start(cmd, log, env)
        return self.finish(proc, since, limit, log)

    def base_env(self) -> dict:
        src = str(ROOT / "src")
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
            "LEARNGENE_CACHE": str(self.work / "cache"),
        }

    def limit(self, stage: str) -> float:
        """The stage's time limit (4x on a machine without CUDA: the CPU stand-ins), within the deadline."""
        return min(self.own_limit(stage), self.left() - 5)

    def own_limit(self, stage: str) -> float:
        return LIMITS[stage] * (4 if self.cuda is False else 1)

    # ---- the summary ------------------------------------------------------------------------------------------
    def write_summary(self, running: str | None = None) -> None:
        env = self.env
        device = env.get("device") or ("no CUDA device" if env.get("cuda") is False else "device unknown")
        lines = [
            f"# GPU check: {device}, commit {commit()}, {env.get('date', '?')}",
            "",
            f"Command: `{settings()}bash benchmarks/gpu_check.sh {self.out}`; "
            f"{time.monotonic() - self.started:.0f} s of a {self.deadline - self.started:.0f} s budget"
            + (f"; running now: {running}" if running else "; finished"),
            "",
            "| stage | status | seconds | result |",
            "|---|---|---:|---|",
            *(f"| {r.stage} | {r.status} | {r.seconds:.0f} | {r.line} |" for r in self.results),
        ]
        if self.speed:
            lines += ["", "## Speed (benchmarks/gpu_speed.py; ratio: to the plain timm step in the same run)", ""]
            lines += [
                "| device | size | compile | step | images/s | MFU | vs plain |",
                "|---|---|---|---|---:|---:|---:|",
            ]
            for r in self.speed:
                mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "n/a"
                ratio = f"{r['vs_plain']:.3f}" if r.get("vs_plain") is not None else "n/a"
                lines.append(
                    f"| {r['device']} | {r['size']} | {r['compile']} | {r['kind']} | {r['images_per_s']:,.1f} | {mfu} "
                    f"| {ratio} |"
                )
        if self.measured:
            lines += ["", "## What the GPU tests measured (largest over their cases; share: of the bound)", ""]
            lines += ["| comparison | largest measured | bound | worst case |", "|---|---:|---:|---|"]
            for m in self.measured:
                lines.append(f"| {m['check']} | {m['value']:.3g} | {m['bound']:.3g} | {m['where']} |")
        lines += ["", "## Environment", "", "```", json.dumps(env, indent=1), "```", ""]
        for name, text in (("summary.md", "\n".join(lines)), ("summary.json", self.as_json(running))):
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(text)
            tmp.replace(self.out / name)

    def as_json(self, running: str | None) -> str:
        data = {
            "commit": commit(),
            "running": running,
            "seconds": round(time.monotonic() - self.started, 1),
            "stages": [asdict(r) for r in self.results],
            "env": self.env,
            "speed": self.speed,
            "measured": self.measured,
        }
        return json.dumps(data, indent=1) + "\n"


def settings() -> str:
    """The GIT_COMMIT and GPU_CHECK_* settings this run was given, as they prefix its command line."""
    given = {"GIT_COMMIT": commit(), **{k: v for k, v in sorted(os.environ.items()) if k.startswith("GPU_CHECK_")}}
    return "".join(f"{k}={shlex.quote(v)} " for k, v in given.items())


def commit() -> str:
    """GIT_COMMIT, else a COMMIT file at the repository's root, else git's HEAD (a copy may have no .git)."""
    if os.environ.get("GIT_COMMIT"):
        return os.environ["GIT_COMMIT"].strip()
    if (ROOT / "COMMIT").is_file():
        return (ROOT / "COMMIT").read_text().strip()
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return head.stdout.strip() if head.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def last_line(path: Path, pattern: str = r"error|Error|FAILED|Traceback") -> str:
    """The last line of ``path`` matching ``pattern`` (else its last line), cut for a table cell."""
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    hits = [ln for ln in lines if re.search(pattern, ln)] or lines or [""]
    return hits[-1].strip().replace("|", "/")[:200]


def no_cuda(check: Check) -> str | None:
    """Why a CUDA stage cannot run here (None: it can)."""
    if check.cuda is False:
        return "needs CUDA (no CUDA device is visible here)"
    return None


# ---- stages --------------------------------------------------------------------------------------------------
def stage_env(check: Check) -> Result:
    tic = time.monotonic()
    env: dict = {"date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC", "commit": commit()}
    try:
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        env["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()[:200]
    except (OSError, subprocess.TimeoutExpired) as exc:
        env["nvidia_smi"] = f"not run ({type(exc).__name__})"
    try:
        probe = subprocess.run(
            [PY, "-c", ENV_PROBE], capture_output=True, text=True, timeout=LIMITS["env"], env=check.base_env()
        )
        env.update(json.loads(probe.stdout.strip().splitlines()[-1]))
        status = "passed"
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        env["probe_error"] = f"{type(exc).__name__}: {exc}"[:300]
        status = "failed"
    check.env, check.cuda = env, env.get("cuda")
    line = (
        f"nvidia-smi: {env.get('nvidia_smi', '?')}; torch {env.get('torch', '?')} (CUDA {env.get('cuda_build')}, cuDNN "
        f"{env.get('cudnn')}), timm {env.get('timm', '?')}, transformers {env.get('transformers', '?')}, triton "
        f"{env.get('triton', '?')}, xdist {env.get('xdist', '?')}, C compiler {env.get('c_compiler')}; python "
        f"{env.get('python', '?')}, {env.get('cpus', '?')} CPUs"
    )
    return Result("env", status, time.monotonic() - tic, line.replace("|", "/"))


def stage_speed(check: Check, stage: str) -> Result:
    rows = check.work / f"{stage}.jsonl"
    args = [*SPEED_ARGS, *SPEED_RUNS[stage], "--json", str(rows)]
    why = no_cuda(check)
    if why:  # the command's arguments parse and it refuses in one line; the eager stage also runs --quick
        code, seconds = check.run([PY, "benchmarks/gpu_speed.py", *args], "speed.log", check.limit(stage))
        said = last_line(check.out / "speed.log", r"gpu_speed.py: error")
        ok = code == 2 and "needs a GPU" in said
        if stage == "speed-eager":
            quick = ["--quick", "--reps", "1", "--steps", "2", "--warmup", "1", "--sizes", "L4-D96-H3 64px/16"]
            code, more = check.run(
                [PY, "benchmarks/gpu_speed.py", *quick, "--json", str(rows)], "speed.log", check.limit(stage)
            )
            seconds, ok = seconds + more, ok and code == 0
            check.speed += read_jsonl(rows)
        stand_in = "refuses in one line" + (" and --quick runs" if stage == "speed-eager" else "")
        return Result(stage, "skipped", seconds, f"{why}; CPU stand-in ({stand_in}): {'passed' if ok else 'FAILED'}")
    code, seconds = check.run([PY, "benchmarks/gpu_speed.py", *args], "speed.log", check.limit(stage))
    found = read_jsonl(rows)
    check.speed += found
    parts = [
        f"{r['size']} {r['kind']} {r['images_per_s']:,.0f} img/s"
        + (f" ({r['vs_plain']:.3f}x)" if r["kind"] != "plain" and r.get("vs_plain") is not None else "")
        for r in found
    ]
    status = "passed" if code == 0 and found else ("timed out" if code is None else "failed")
    tail = "" if status == "passed" else f"; {last_line(check.out / 'speed.log')}"
    return Result(stage, status, seconds, ("; ".join(parts) or "no rows") + tail)


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


PYTEST_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
PROGRESS = re.compile(r"^\[gw\d+\] \[\s*\d+%\] (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) ")


def pytest_counts(log: Path) -> str:
    """pytest's closing counts, or (when it was stopped) the outcomes its verbose progress lines show."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    closing = [ln for ln in lines if ln.startswith("=") and PYTEST_COUNTS.search(ln)]
    if closing:
        took = closing[-1].split(" in ")[-1].strip(" =").split()[0]
        return ", ".join(f"{n} {what}" for n, what in PYTEST_COUNTS.findall(closing[-1])) + f" in {took}"
    seen: dict[str, int] = {}
    for ln in lines:
        if m := PROGRESS.match(ln):
            seen[m.group(1)] = seen.get(m.group(1), 0) + 1
    return "stopped before its summary; so far " + (", ".join(f"{n} {k}" for k, n in seen.items()) or "nothing")


def failures(log: Path, most: int = 6) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    failed = sorted({ln.split()[1] for ln in lines if ln.startswith(("FAILED ", "ERROR ")) and len(ln.split()) > 1})
    more = f" (+{len(failed) - most} more)" if len(failed) > most else ""
    return ("; failed: " + ", ".join(failed[:most]) + more) if failed else ""


def pytest_result(stage: str, code: int | None, seconds: float, log: Path, prefix: str = "") -> Result:
    status = {0: "passed", None: "timed out", 5: "failed"}.get(code, "failed")
    line = prefix + pytest_counts(log) + failures(log)
    reported = log.with_name(f"{stage}-failures.log")
    if reported.exists():
        common = "; ".join(f"{n}× {said}" for said, n in common_errors(reported))
        line += f"; details in {reported.name}; most common: {common}"
    return Result(stage, status, seconds, line.replace("|", "/"))


def reporting(stage: str, check: Check) -> tuple[list[str], dict[str, str]]:
    """pytest arguments and environment that append each failure of ``stage`` to OUTDIR/<stage>-failures.log as it
    happens (benchmarks/gpu_check_report.py), so that a stage stopped at its limit still says what failed and why."""
    path = os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))
    env = {
        "GPU_CHECK_FAILURES": str(check.out / f"{stage}-failures.log"),
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{path}",
    }
    return ["-p", "gpu_check_report"], env


def stage_gpu_tests(check: Check) -> Result:
    probe = check.work / "probe.jsonl"
    cmd = [PY, "-m", "pytest", "-m", "gpu", "tests/test_gpu.py", "-p", "no:cacheprovider", "--verbosity=0", "-ra"]
    plugin, env = reporting("gpu-tests", check)
    code, seconds = check.run(
        [*cmd, *plugin, "--durations=10"],
        "gpu-tests.log",
        check.limit("gpu-tests"),
        {**env, "LEARNGENE_GPU_PROBE": str(probe)},
    )
    check.measured = worst_measured(read_jsonl(probe))
    result = pytest_result("gpu-tests", code, seconds, check.out / "gpu-tests.log")
    if check.cuda is False:
        result.status, result.line = "skipped", f"{no_cuda(check)}: {result.line} (rc {code})"
    elif check.measured:
        worst = max(check.measured, key=lambda m: m["value"] / m["bound"] if m["bound"] else 0)
        result.line += f"; closest to its bound: {worst['check']} at {worst['value'] / worst['bound']:.0%} of it"
    return result


def worst_measured(records: list[dict]) -> list[dict]:
    """The largest measured value of each comparison (over parametrizations, keys and methods)."""
    worst: dict[str, dict] = {}
    for r in records:
        if r["check"] not in worst or r["value"] > worst[r["check"]]["value"]:
            worst[r["check"]] = r
    return list(worst.values())


def suite_command(check: Check) -> tuple[list[str], str]:
    """The rest of the suite under pytest-xdist, with GPU_CHECK_SUITE_ARGS (e.g. some files, ``-k``, ``--dist load``)
    after pytest's own; without CUDA, two small files (the command and its log parsing)."""
    workers = os.environ.get("GPU_CHECK_WORKERS", "14") if check.cuda is not False else "2"
    xdist = not str(check.env.get("xdist", "missing")).startswith("missing")
    parallel = ["-n", workers, "--dist", "loadscope"] if xdist else []
    chosen = shlex.split(os.environ.get("GPU_CHECK_SUITE_ARGS", ""))
    files = chosen if check.cuda is not False else ["tests/test_spec.py", "tests/test_progress.py", *chosen]
    cmd = [PY, "-m", "pytest", *parallel, "-m", "not gpu", "-p", "no:cacheprovider", "--verbosity=1", "-ra"]
    note = "" if xdist else "pytest-xdist missing: one process; "
    return [*cmd, *reporting("suite", check)[0], "--durations=25", *files], note


def stage_torchrun(check: Check) -> Result:
    device = "cpu" if check.cuda is False else "cuda"
    cmd = [PY, "benchmarks/gpu_check_torchrun.py", str(check.work / "torchrun"), "--device", device]
    code, seconds = check.run(cmd, "torchrun.log", check.limit("torchrun"))
    lines = (check.out / "torchrun.log").read_text(errors="replace").splitlines()
    found = [json.loads(ln) for ln in lines if ln.startswith("{") and ln.endswith("}")]
    if not found:
        status = "timed out" if code is None else "failed"
        return Result("torchrun", status, seconds, f"no result (rc {code}); {last_line(check.out / 'torchrun.log')}")
    r = found[-1]
    at = r.get("killed_at")
    killed = (
        f"killed in epoch {at['epoch'] + 1}, after step {at['global_step']} of {r['steps']}" if at else "not killed"
    )
    line = (
        f"process group {r.get('process_group')}; {killed}; resumed gene "
        f"{'== uninterrupted gene' if r['bit_exact'] else '!= uninterrupted gene (or a run failed)'} "
        f"(sha256 {str(r.get('reference_sha256'))[:12]} / {str(r.get('resumed_sha256'))[:12]}); a second "
        f"uninterrupted run's gene {'equal' if r['repeat_equals_reference'] else 'differs'}; plain torchrun "
        f"(no group) gene {'equal' if r['plain_equals_ddp'] else 'differs'}; exits {r['reference_exit']}/"
        f"{r['repeat_exit']}/{r['plain_exit']}/{r['resumed_exit']}; uninterrupted {r['reference_seconds']} s, "
        f"resume {r['resumed_seconds']} s"
    )
    said = sorted({ln for lines in r.get("errors", {}).values() for ln in lines})
    if said:
        runs = [name for name, lines in r["errors"].items() if lines]
        line += f"; errors (in {', '.join(runs)}): " + " // ".join(ln[:300] for ln in said[:3])
    line = line.replace("|", "/")
    if check.cuda is False:
        return Result("torchrun", "skipped", seconds, f"{no_cuda(check)}; CPU stand-in (gloo): {line}")
    return Result("torchrun", "passed" if r["bit_exact"] else "failed", seconds, line)


def fashion_mnist() -> Path | None:
    for place in filter(None, [os.environ.get("LEARNGENE_DATA"), *FASHION_MNIST]):
        for folder in (ROOT / place, ROOT / place / "fashion-mnist"):
            if any((folder / f"train-images-idx3-ubyte{end}").exists() for end in ("", ".gz")):
                return folder
    return None


def stage_demo(check: Check, concurrent: str) -> Result:
    data = fashion_mnist()
    found = f"Fashion-MNIST in {data}" if data else "Fashion-MNIST not found (carry data/fashion-mnist)"
    demo = [PY, "-m", "learngene", "demo", "--quick", "--device", "cuda", "--quiet", "--out", str(check.work / "demo")]
    demo += ["--data-dir", str(data)] if data else []
    if check.cuda is False:  # the command line parses and is refused in one line
        code, seconds = check.run(demo, "demo.log", check.limit("demo"))
        ok = code == 2 and "no GPU is visible" in last_line(check.out / "demo.log", "error")
        return Result(
            "demo",
            "skipped",
            seconds,
            f"{no_cuda(check)}; {found}; CPU stand-in (refuses in one line): {'passed' if ok else 'FAILED'}",
        )
    if data:
        code, seconds = check.run(demo, "demo.log", check.limit("demo"))
        status = {0: "passed", None: "timed out"}.get(code, "failed")
        tail = "" if code == 0 else f"; {last_line(check.out / 'demo.log')}"
        return Result(
            "demo", status, seconds, f"learngene demo --quick --device cuda: wall {seconds:.1f} s{concurrent}{tail}"
        )
    smoke = [PY, "-m", "learngene", "bench", "--profile", "gpu-smoke", "--device", "cuda", "--max-steps", "10"]
    code, seconds = check.run([*smoke, "--quiet", "--out", str(check.work / "smoke")], "demo.log", check.limit("demo"))
    record = check.work / "smoke" / "smoke.json"
    stages = json.loads(record.read_text())["stages"] if record.exists() else []
    times = ", ".join(f"{s['stage']} {s['seconds']:.1f} s" for s in stages)
    status = {0: "passed", None: "timed out"}.get(code, "failed")
    return Result(
        "demo",
        status,
        seconds,
        f"{found}: ran bench --profile gpu-smoke --max-steps 10 instead: {times or 'no stage finished'}{concurrent}",
    )


# ---- the order ---------------------------------------------------------------------------------------------------
def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print("usage: bash benchmarks/gpu_check.sh OUTDIR", file=sys.stderr)
        return 2
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    wanted = [s.strip() for s in os.environ.get("GPU_CHECK_STAGES", ",".join(STAGES)).split(",") if s.strip()]
    unknown = [s for s in wanted if s not in STAGES]
    if unknown:
        print(
            f"gpu_check: unknown stage(s) {', '.join(unknown)} in GPU_CHECK_STAGES; choose from {', '.join(STAGES)}",
            file=sys.stderr,
        )
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu_check."))
    check = Check(out, work, deadline=time.monotonic() + LIMITS["env"])
    check.write_summary(running="env")
    check.record(stage_env(check))  # always: the other stages read what it found
    budget = os.environ.get("GPU_CHECK_BUDGET", "470" if check.cuda is not False else "1800")
    check.deadline = check.started + float(budget)
    for stage in ("speed-eager", "compile-vit-s"):
        if stage in wanted:
            guarded(check, stage, lambda stage=stage: stage_speed(check, stage))
    suite = start_suite(check) if "suite" in wanted else None
    for stage, run in (("gpu-tests", stage_gpu_tests), ("torchrun", stage_torchrun)):
        if stage in wanted:
            guarded(check, stage, lambda run=run: run(check))
    if "demo" in wanted:
        busy = "; while the suite ran alongside" if suite and suite[0].poll() is None else ""
        guarded(check, "demo", lambda: stage_demo(check, busy))
    if suite is not None:
        finish_suite(check, *suite, reserve=MIN_SECONDS["compile-vit-b"] + 5 if "compile-vit-b" in wanted else 0)
    if "compile-vit-b" in wanted:  # last: it needs the machine to itself, and a rerun can give it alone
        guarded(check, "compile-vit-b", lambda: stage_speed(check, "compile-vit-b"))
    for stage in STAGES[1:]:
        if stage not in wanted:
            check.record(Result(stage, "skipped", 0, "not in GPU_CHECK_STAGES"))
    check.write_summary()
    print((out / "summary.md").read_text())
    return 0


def start_suite(check: Check) -> tuple[subprocess.Popen, float, str, list[float]] | None:
    """The suite, started in the background (it runs on the CPU while the GPU stages run)."""
    if check.left() < 60:
        check.record(Result("suite", "skipped", 0, f"no time left ({check.left():.0f} s of the budget)"))
        return None
    cmd, note = suite_command(check)
    proc, since = check.start(cmd, "suite.log", reporting("suite", check)[1])
    ended: list[float] = []  # when it exits, noted by a thread while the foreground stages run
    threading.Thread(target=lambda: (proc.wait(), ended.append(time.monotonic())), daemon=True).start()
    check.record(Result("suite", "running", 0, f"started in the background: {' '.join(cmd[3:])}".replace("|", "/")))
    return proc, since, note, ended


def finish_suite(
    check: Check, proc: subprocess.Popen, since: float, note: str, ended: list[float], reserve: float
) -> None:
    """Wait for the suite, stopping it (gracefully: its counts are printed) at its limit, or ``reserve`` seconds before
    the deadline (the time the stage after it needs)."""
    check.write_summary(running="suite")
    limit = min(check.own_limit("suite"), check.deadline - 5 - reserve - since)
    code, seconds = check.finish(proc, since, limit, "suite.log")
    seconds = ended[0] - since if ended else seconds  # it may have ended while another stage ran
    prefix = note + ("" if check.cuda is not False else f"{no_cuda(check)}; CPU stand-in (2 files, -n 2): ")
    result = pytest_result("suite", code, seconds, check.out / "suite.log", prefix)
    if check.cuda is False:
        result.status = "skipped" if code == 0 else "failed"
    check.record(result)


def guarded(check: Check, stage: str, run) -> None:
    """Run one stage, whatever happens to it: a crash of this script's own code is that stage's failure."""
    if check.left() < MIN_SECONDS.get(stage, 20):
        check.record(Result(stage, "skipped", 0, f"no time left ({check.left():.0f} s of the budget)"))
        return
    check.write_summary(running=stage)
    tic = time.monotonic()
    try:
        result = run()
    except Exception as exc:  # reported, and the next stage runs
        result = Result(
            stage, "failed", time.monotonic() - tic, f"gpu_check.py itself failed: {type(exc).__name__}: {exc}"[:300]
        )
    check.record(result)


if __name__ == "__main__":
    sys.exit(main())
