"""The GPU check's bundle (make gpu-check), as a GPU machine would get it: unpacked from its
tarball into a fresh directory, then

1. run on the tests' stand-in driver (run.sh OUT --stand-in): every check passes, and
   gpu-check.md says the machine, NVML's state, each check and the kill's ledger;
2. run as on a GPU machine: here, with no GPU, it says why and exits 77 (on a machine with one,
   every check must pass).

  gpu_check_test.py BUNDLE_DIR   (the build's gpu-check/, made by the gpu-check-bundle target)"""
import os
import subprocess
import sys
import tarfile
import tempfile


def main():
    if os.geteuid() != 0:
        print("gpu_check_test: needs root (BPF, cgroups)")
        return 77
    tarball = os.path.join(sys.argv[1], "headroom-gpu-check.tar.gz")
    failures = []
    with tempfile.TemporaryDirectory(prefix="headroom-gpu-bundle-") as tmp:
        with tarfile.open(tarball) as t:
            t.extractall(tmp)
        run = os.path.join(tmp, "headroom-gpu-check", "run.sh")
        lib = os.path.join(tmp, "headroom-gpu-check", "lib")
        if not os.path.exists(os.path.join(lib, "ld-linux-x86-64.so.2")) or not os.path.exists(
                os.path.join(lib, "libc.so.6")):
            failures.append("the bundle lacks its loader or its libc")
        # The stand-in driver: every check passes.
        out = os.path.join(tmp, "stand-in")
        r = subprocess.run([run, out, "--stand-in"], capture_output=True, text=True, timeout=240, check=False)
        md = open(os.path.join(out, "gpu-check.md")).read() if os.path.exists(os.path.join(out, "gpu-check.md")) else ""
        if r.returncode != 0:
            failures.append(f"--stand-in exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        for want in ("- kernel: ", "- NVML: active", "**PASS** pinned", "**PASS** device", "**PASS** NVML",
                     "**PASS** ledger pinned", "**PASS** ledger device", "LEDGER AT THE KILL",
                     "6 of 6 checks passed."):
            if want not in md:
                failures.append(f"gpu-check.md lacks {want!r}")
        # As on a GPU machine: no GPU here, said, 77; a GPU: every check passes.
        out = os.path.join(tmp, "real")
        r = subprocess.run([run, out], capture_output=True, text=True, timeout=240, check=False)
        md = open(os.path.join(out, "gpu-check.md")).read() if os.path.exists(os.path.join(out, "gpu-check.md")) else ""
        if r.returncode == 77:
            if "No GPU to check on" not in md or '"ready": false' not in md:
                failures.append(f"no GPU, but gpu-check.md does not say why:\n{md}")
            if os.path.exists(os.path.join(out, "srs.bin")):
                failures.append("the SRS file was left behind")
        elif r.returncode != 0:
            failures.append(f"the real check exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    for f in failures:
        print("FAIL:", f)
    print("gpu_check_test:", "ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
