"""What the kernel matrix runs in each guest (and with --host, here): named steps, each one
command with a time limit. The gtest steps write XML into the results folder, which the matrix
reads test by test.

- smoke: the v2 path that `make test` guards on every submission: a real OOM kill caught by BPF
  and kmsg and told apart from kill -9, snapshot truth against /proc and memory.stat (the root
  cgroup's processes included) with each per-process source, the task iterator against /proc
  field by field, one `headroom run` retry, and the journal's picture of a kill
  from the kernel's report (a cgroup born and killed between two samples), and the kernel's
  notification that a cgroup nears its limit.
- full: every integration test, the privileged kit tests (the demo, Prometheus on a real agent,
  the systemd unit's capability set), the container scenarios, and a real Podman container's
  OOM kill named through Podman's API.
- warning: the warning before an OOM kill, every scenario for a minute (a climb warned ahead, a
  burst said to be beyond a warning, calm and page cache never warned, the prover's hook, the
  events, `headroom run --on-warning`), and the kernel's notifications (docs/warnings.md).
- cpu-cost: the cost of sampling every process on this guest's CPUs (tests/bench/guest_cost.py;
  `make bench` runs it on 6.12 with 2 and with 32 CPUs: tests/bench/cpus.py).
- capture: real fixtures for the unit tests (tests/fixtures/capture.sh): the cgroup tree and
  the kernel's OOM reports (memcg, memory.oom.group, global).
"""

import dataclasses
import pathlib

SOURCE = pathlib.Path(__file__).resolve().parent.parent.parent
SUITES = ["full", "smoke", "warning", "cpu-cost", "capture"]

SMOKE_TESTS = [
    "Sensors.RealOomKillIsCaughtJoinedAndClassified",
    "Sensors.KillNineIsSignaledAndExitIsExited",
    # /proc and the BPF task iterator (the sampler's cache over /proc is the same on every kernel:
    # the host runs it, and `make test-kernels` everywhere)
    "Sources/SnapshotLive.BreakdownMatchesKnownAllocations/Procfs",
    "Sources/SnapshotLive.BreakdownMatchesKnownAllocations/TaskIterator",
    "Sources/SnapshotLive.EveryProcessIsInTheTable/Procfs",
    "Sources/SnapshotLive.EveryProcessIsInTheTable/TaskIterator",
    "ProcessSource.TaskIteratorMatchesProcfsFieldByField",
    # held cgroup files read again, removed and made again (kernfs on v2 as on v1)
    "CgroupFiles.HeldFilesShowTheCgroupNowAndFollowItsRemovalAndRebirth",
    "Run.AnOomKilledProverIsRetriedWithALargerMarginAndSucceeds",
    "Journal.ACgroupBornAndKilledBetweenTwoSamplesHasTheWholePictureOfTheKill",
    # no kill lost across agent restarts: one left in flight by an agent SIGKILLed right after
    # it, one while no agent ran (from the kernel's log), and a restart after (the host runs the
    # other scenarios too)
    "Restart.AKillLeftInFlightByASigkilledAgentAndOneWhileNoneRanAreEachJournaledOnce",
    # the kernel's notifications (memory.events) that a cgroup nears its limit; the minute of every
    # warning scenario runs in the full suite and in `--suite warning`
    "Warning.TheKernelSaysWhenACgroupNearsItsLimit",
]


@dataclasses.dataclass
class Step:
    name: str
    timeout: int  # seconds
    argv: list
    env: dict = dataclasses.field(default_factory=dict)


def host_layout() -> str:
    """This machine's memory hierarchy, named like the guests' layouts."""
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        dash = fields.index("-")
        fstype, opts = fields[dash + 1], fields[dash + 3]
        if fstype == "cgroup" and "memory" in opts.split(","):
            return "v1"
    return "v2"


def kit_env(build: pathlib.Path) -> dict:
    return {"HEADROOM_SOURCE_DIR": str(SOURCE), "HEADROOM_BINARY": str(build / "headroom"),
            "HEADROOM_TEST_PROVER": str(build / "tests" / "headroom-test-prover"),
            "HEADROOM_WORKLOAD": str(build / "tests" / "headroom-workload")}


def gtest(name: str, build: pathlib.Path, results: pathlib.Path, timeout: int, tests: list | None = None) -> Step:
    argv = [str(build / "tests" / "integration_tests"), f"--gtest_output=xml:{results / (name + '.xml')}"]
    if tests:
        argv.append("--gtest_filter=" + ":".join(tests))
    return Step(name, timeout, argv)


def only(steps: list, names: list | None) -> list:
    """The steps named (all of them for None), in the plan's order."""
    return steps if names is None else [s for s in steps if s.name in names]


def filtered(steps: list, pattern: str | None) -> list:
    """The gtest steps narrowed to the tests that match a gtest filter (all of them for None)."""
    if not pattern:
        return steps
    out = []
    for s in steps:
        if s.argv and s.argv[0].endswith("integration_tests"):
            argv = [x for x in s.argv if not x.startswith("--gtest_filter=")] + ["--gtest_filter=" + pattern]
            s = dataclasses.replace(s, argv=argv)
        out.append(s)
    return out


def plan(suite: str, build: pathlib.Path, layout: str, results: pathlib.Path, guest: bool = True) -> list:
    kit = SOURCE / "tests" / "kit"
    if suite == "smoke":
        return [gtest("smoke", build, results, 420, SMOKE_TESTS)]
    if suite == "warning":
        return [gtest("warning", build, results, 600, ["Warning.*"])]
    if suite == "full":
        steps = [gtest("integration", build, results, 3600)]
        for t in ("demo", "prometheus_live", "capabilities", "container", "workload_names"):
            steps.append(Step(f"kit-{t.replace('_', '-')}", 900, ["/usr/bin/python3", str(kit / f"{t}_test.py")],
                              kit_env(build)))
        return steps
    if suite == "cpu-cost":
        return [Step("cpu-cost", 600, ["/usr/bin/python3", str(SOURCE / "tests" / "bench" / "guest_cost.py"),
                                       str(build / "headroom"), str(results / "cost.json")])]
    if suite == "capture":
        argv = ["/usr/bin/python3", str(SOURCE / "tests" / "fixtures" / "capture_oom.py"), str(results / "fixtures"),
                str(build / "tests" / "headroom-workload")]
        if guest:  # a machine-wide OOM kill only where it hurts nobody
            argv.append("--global")
        return [Step("capture", 900, argv, {"HEADROOM_CAPTURE_BY": "make capture-fixtures"})]
    raise ValueError(f"unknown suite {suite}")
