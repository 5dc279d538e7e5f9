"""The kernel's own BPF statistics (kernel.bpf_stats_enabled: run_time_ns / run_cnt per
program), shared by the bench scripts."""
import json
import subprocess


def programs():
    """Every loaded program by id, as `bpftool prog show` describes it (with its run stats)."""
    out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=True).stdout
    return {p["id"]: p for p in json.loads(out)}


def totals(stats):
    """Nanoseconds run and runs, summed over the programs `stats`."""
    return sum(s.get("run_time_ns", 0) for s in stats), sum(s.get("run_cnt", 0) for s in stats)


def per_run(stats):
    """Nanoseconds per run over the programs `stats` (summed), and how many runs."""
    ns, cnt = totals(stats)
    return (ns / cnt if cnt else float("nan")), cnt


def enabled():
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        return f.read().strip() == "1"


def set_enabled(on):
    subprocess.run(["sysctl", "-q", "-w", f"kernel.bpf_stats_enabled={1 if on else 0}"], check=True)
