"""cAdvisor for the benchmarks, from Debian 11's `cadvisor` package (Debian 12 has none).

binary() resolves the package through a private apt state under the build directory (the
machine's own sources untouched; the same apt options as the kernel matrix's, from
tests/kernels/vm.py), downloads it and unpacks it with dpkg-deb -x, once: BUILD/cadvisor/VERSION/
usr/bin/cadvisor. It depends on libc6 and libzstd1 only, which Debian 12 has. Later runs ask apt
whether a newer one is out and use the cached one if apt cannot answer.
"""
import os
import pathlib
import shutil
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "kernels"))
import vm  # noqa: E402  (the kernel matrix's private apt state)

SUITE = vm.Release("cadvisor", "bullseye", "Debian 11")
PACKAGE = "cadvisor"


def binary(build):
    """The path of cAdvisor's binary, downloaded and unpacked under BUILD/cadvisor once."""
    cache = pathlib.Path(build).resolve() / "cadvisor"
    state = cache / f"apt-{SUITE.suite}"
    marker = cache / "current"  # the version of the last resolution
    try:
        for d in ("lists/partial", "cache/archives/partial"):
            (state / d).mkdir(parents=True, exist_ok=True)
        (state / "sources.list").write_text(SUITE.sources())
        opts = vm._apt_options(state)
        subprocess.run(["apt-get", *opts, "update"], check=True, capture_output=True, text=True)
        pol = subprocess.run(["apt-cache", *opts, "policy", PACKAGE], check=True, capture_output=True,
                             text=True).stdout
        version = next(line.split(":", 1)[1].strip() for line in pol.splitlines()
                       if line.strip().startswith("Candidate:"))
        if version == "(none)":
            raise RuntimeError(f"{SUITE.suite} has no {PACKAGE}")
        marker.write_text(version + "\n")
    except (subprocess.CalledProcessError, StopIteration, OSError, RuntimeError) as e:
        detail = (getattr(e, "stderr", "") or str(e)).strip()
        if not marker.exists():
            raise SystemExit(f"bench: resolving {SUITE.suite}'s {PACKAGE}: {detail[:300]}") from e
        print(f"bench: apt failed ({detail[:200]}); using the cached cAdvisor", file=sys.stderr)
    version = marker.read_text().strip()
    root = cache / version.replace(":", "%3a")
    path = root / "usr" / "bin" / "cadvisor"
    if not (root / ".unpacked").exists():
        debs = cache / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        found = sorted(debs.glob(f"{PACKAGE}_{version.split(':')[-1]}_*.deb"))
        if not found:
            print(f"bench: downloading {PACKAGE} {version} ({SUITE.suite})", flush=True)
            subprocess.run(["apt-get", *vm._apt_options(state), "download", f"{PACKAGE}={version}"], check=True,
                           cwd=debs, capture_output=True, text=True)
            found = sorted(debs.glob(f"{PACKAGE}_*.deb"), key=os.path.getmtime)
            if not found:
                raise SystemExit(f"bench: apt-get download {PACKAGE}={version} left no .deb in {debs}")
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(found[-1]), str(tmp)], check=True)
        (tmp / ".unpacked").write_text(version + "\n")
        tmp.rename(root)
    return str(path), version
