"""Debian's own kernels under qemu (TCG), for the kernel matrix.

fetch() resolves and downloads a kernel package through a private apt state under build/
(never the machine's own sources), unpacks it with dpkg -x and caches both; initramfs() builds a
busybox-static initramfs with the kernel's own virtio/9p modules and tests/kernels/init; boot()
starts the guest with the host's / shared read-only over 9p and one writable results share,
streams its console and returns when it powers off or its time is up.
"""

import dataclasses
import hashlib
import lzma
import os
import pathlib
import select
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIRROR = "http://deb.debian.org"


@dataclasses.dataclass(frozen=True)
class Release:
    name: str  # what the matrix calls it: "6.1"
    suite: str  # Debian suite whose linux-image-amd64 it is
    distro: str  # "Debian 12", for the tables

    def sources(self) -> str:
        return (f"deb [signed-by={KEYRING}] {MIRROR}/debian {self.suite} main\n"
                f"deb [signed-by={KEYRING}] {MIRROR}/debian-security {self.suite}-security main\n")


RELEASES = {
    "5.10": Release("5.10", "bullseye", "Debian 11"),
    "6.1": Release("6.1", "bookworm", "Debian 12"),
    "6.12": Release("6.12", "trixie", "Debian 13"),
}

# Modules the initramfs loads, in order (dependencies first; a name this kernel has built in, or
# has not split out yet, is skipped: 5.10 has no netfs nor virtio_pci_{modern,legacy}_dev, and
# ships its modules as plain .ko). The 9p root needs the virtio PCI transport and 9p over virtio.
MODULES = ["virtio", "virtio_ring", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
           "netfs", "fscache", "9pnet", "9pnet_virtio", "9p"]


@dataclasses.dataclass(frozen=True)
class KernelTree:
    release: Release
    package: str  # linux-image-6.1.0-57-amd64
    version: str  # 6.1.192-3
    root: pathlib.Path  # the unpacked package

    @property
    def uname(self) -> str:
        return self.package.removeprefix("linux-image-")

    @property
    def vmlinuz(self) -> pathlib.Path:
        return self.root / "boot" / f"vmlinuz-{self.uname}"

    @property
    def modules(self) -> pathlib.Path:
        for base in ("lib/modules", "usr/lib/modules"):
            d = self.root / base / self.uname
            if d.is_dir():
                return d
        raise FileNotFoundError(f"no modules directory for {self.uname} under {self.root}")


def log(msg: str) -> None:
    print(f"kernels: {msg}", file=sys.stderr, flush=True)


def _apt_options(state: pathlib.Path) -> list[str]:
    return ["-o", f"Dir::Etc::sourcelist={state}/sources.list",
            "-o", "Dir::Etc::sourceparts=/nonexistent",
            "-o", f"Dir::State::Lists={state}/lists",
            "-o", f"Dir::Cache={state}/cache",
            "-o", "Dir::State::status=/dev/null",
            "-o", "APT::Sandbox::User=root",
            "-o", "Debug::NoLocking=1", "-q"]


def fetch(release: Release, cache: pathlib.Path, offline: bool = False) -> KernelTree:
    """The newest linux-image-amd64 of the release's suite, downloaded and unpacked once."""
    state = cache / f"apt-{release.suite}"
    marker = cache / f"{release.suite}.current"  # "package version" of the last resolution
    if not offline:
        try:
            for d in ("lists/partial", "cache/archives/partial"):
                (state / d).mkdir(parents=True, exist_ok=True)
            (state / "sources.list").write_text(release.sources())
            opts = _apt_options(state)
            subprocess.run(["apt-get", *opts, "update"], check=True, capture_output=True, text=True)
            dep = subprocess.run(["apt-cache", *opts, "depends", "linux-image-amd64"], check=True,
                                 capture_output=True, text=True).stdout
            package = next(line.split(":", 1)[1].strip() for line in dep.splitlines()
                           if line.strip().startswith("Depends: linux-image-"))
            pol = subprocess.run(["apt-cache", *opts, "policy", package], check=True,
                                 capture_output=True, text=True).stdout
            version = next(line.split(":", 1)[1].strip() for line in pol.splitlines()
                           if line.strip().startswith("Candidate:"))
            marker.write_text(f"{package} {version}\n")
        except (subprocess.CalledProcessError, StopIteration, OSError) as e:
            detail = getattr(e, "stderr", "") or str(e)
            if not marker.exists():
                raise RuntimeError(f"resolving {release.suite}'s linux-image-amd64: {detail.strip()}") from e
            log(f"{release.suite}: apt failed ({detail.strip()[:200]}); using the cached kernel")
    if not marker.exists():
        raise RuntimeError(f"no cached kernel for {release.suite} (run without --offline once)")
    package, version = marker.read_text().split()
    root = cache / f"{package}_{version}"
    if not (root / ".unpacked").exists():
        debs = cache / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        deb = debs / f"{package}_{version.replace(':', '%3a')}_amd64.deb"
        if not deb.exists():
            log(f"downloading {package} {version} ({release.suite})")
            subprocess.run(["apt-get", *_apt_options(state), "download", f"{package}={version}"], check=True,
                           cwd=debs, capture_output=True, text=True)
            if not deb.exists():  # apt names the file after the package's own version string
                found = sorted(debs.glob(f"{package}_*_amd64.deb"))
                if not found:
                    raise RuntimeError(f"apt-get download {package}={version} left no .deb in {debs}")
                found[-1].rename(deb)
        if root.exists():
            shutil.rmtree(root)
        tmp = root.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
        (tmp / ".unpacked").write_text(f"{package} {version}\n")
        tmp.rename(root)
    return KernelTree(release, package, version, root)


def _module_files(tree: KernelTree) -> dict[str, pathlib.Path]:
    found = {}
    for p in tree.modules.rglob("*.ko*"):
        name = p.name.split(".ko")[0]
        found[name.replace("-", "_")] = p
    return found


def _depends(path: pathlib.Path) -> list[str]:
    out = subprocess.run(["modinfo", "-F", "depends", str(path)], check=True, capture_output=True, text=True).stdout
    return [d.replace("-", "_") for d in out.strip().split(",") if d]


def initramfs(tree: KernelTree, cache: pathlib.Path) -> pathlib.Path:
    """busybox-static, the modules MODULES names with their dependencies (decompressed), init."""
    busybox = pathlib.Path("/bin/busybox")
    init = HERE / "init"
    files = _module_files(tree)
    order: list[str] = []

    def want(name: str, chain: tuple[str, ...] = ()) -> None:
        if name in order or name not in files:
            return  # loaded already, or built into this kernel
        if name in chain:
            raise RuntimeError(f"module dependency loop: {' -> '.join(chain + (name,))}")
        for dep in _depends(files[name]):
            want(dep, chain + (name,))
        order.append(name)

    for m in MODULES:
        want(m)
    key = hashlib.sha256()
    for part in (busybox.read_bytes(), init.read_bytes(), "\n".join(order).encode()):
        key.update(part)
    for m in order:
        key.update(files[m].read_bytes())
    out = cache / f"initrd-{tree.uname}-{key.hexdigest()[:12]}.cpio.gz"
    if out.exists():
        return out
    staging = cache / f"initrd-{tree.uname}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    for d in ("bin", "modules", "proc", "sys", "dev", "newroot"):
        (staging / d).mkdir(parents=True)
    shutil.copy2(busybox, staging / "bin" / "busybox")
    shutil.copy2(init, staging / "init")
    for m in order:
        src = files[m]
        data = src.read_bytes()
        if src.name.endswith(".xz"):
            data = lzma.decompress(data)  # busybox insmod takes plain ELF
        elif src.name.endswith(".zst") or src.name.endswith(".gz"):
            raise RuntimeError(f"{src}: only plain and .xz modules are handled")
        (staging / "modules" / f"{m}.ko").write_bytes(data)
    (staging / "modules.order").write_text("\n".join(order) + "\n")
    listing = subprocess.run(["find", "."], cwd=staging, check=True, capture_output=True).stdout
    cpio = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet", "-R", "0:0"], cwd=staging, input=listing,
                          check=True, capture_output=True).stdout
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(subprocess.run(["gzip", "-1"], input=cpio, check=True, capture_output=True).stdout)
    tmp.rename(out)
    shutil.rmtree(staging)
    return out


@dataclasses.dataclass
class BootResult:
    powered_off: bool  # the guest finished and powered off by itself
    timed_out: bool
    seconds: float
    console: pathlib.Path


def hidden_by_tmpfs(paths: list) -> list:
    """Of these host paths, those under /tmp, /run or /var (where the guest lays a tmpfs), the
    outermost of each nest: init binds them back over the tmpfs."""
    under = sorted({pathlib.Path(p).resolve() for p in paths
                    if pathlib.Path(p).resolve().parts[1:2] in (("tmp",), ("run",), ("var",))}, key=lambda p: len(p.parts))
    out = []
    for p in under:
        if not any(p == q or q in p.parents for q in out):
            out.append(p)
    return out


def boot(tree: KernelTree, initrd: pathlib.Path, results: pathlib.Path, guest_script: pathlib.Path,
         memory_mib: int, cpus: int, timeout_s: float, append: str = "", echo: bool = False,
         keep: list = (), icount: bool = False) -> BootResult:
    """Boots the guest; its console goes to results/console.log (and to stderr with echo). keep:
    host paths the run needs (the source and build trees), kept visible where the guest's tmpfs
    over /tmp, /run or /var would hide them. icount: the guest's clocks count its instructions
    (one nanosecond each, `-icount shift=0`; one host thread runs every vCPU in turn), so that what
    it times is the work done, not the host's load; idle time is skipped (`sleep=off`)."""
    results.mkdir(parents=True, exist_ok=True)
    console = results / "console.log"
    kept = hidden_by_tmpfs([*keep, guest_script])
    for p in [*kept, results, guest_script]:
        if any(c in str(p) for c in " ,\t\n"):
            raise RuntimeError(f"{p}: a path with a space or comma cannot go on the guest's kernel command line")
    cmdline = (f"console=ttyS0 panic=-1 quiet mitigations=off headroom.results={results} "
               f"headroom.guest={guest_script} " + (f"headroom.keep={','.join(map(str, kept))} " if kept else "")
               + append).strip()
    accel = ["-accel", "tcg,thread=single", "-icount", "shift=0,sleep=off"] if icount else ["-accel", "tcg,thread=multi"]
    cmd = ["qemu-system-x86_64", *accel, "-cpu", "max", "-smp", str(cpus),
           "-m", f"{memory_mib}M", "-nodefaults", "-display", "none", "-serial", "stdio", "-no-reboot",
           "-kernel", str(tree.vmlinuz), "-initrd", str(initrd), "-append", cmdline,
           "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
           "-virtfs", f"local,path={results},mount_tag=results,security_model=none,multidevs=remap"]
    start = time.monotonic()
    timed_out = False
    with open(console, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        while True:
            left = timeout_s - (time.monotonic() - start)
            if left <= 0:
                timed_out = True
                proc.kill()
                break
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out.write(chunk)
            out.flush()
            if echo:
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
        rc = proc.wait()
    seconds = time.monotonic() - start
    return BootResult(powered_off=(not timed_out and rc == 0), timed_out=timed_out, seconds=seconds, console=console)
