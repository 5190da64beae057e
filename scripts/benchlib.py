"""What the benchmark scripts share (bench-compare, bench-sharded, validate-model, scale-model, scale-*): running a
command with its output echoed, starting a *_perf benchmark on loopback or the emulated cluster and reading its rows,
the marked sections of a document that one script writes and the others keep, and their text wrapped; the torchrun
command line and environment of the torch-level benchmarks (bench-torch, bench-tp-decode); medians of alternated
runs and sizes in words for the tables (bench-compare, bench-peers)."""
import csv
import json
import os
import re
import socket
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"))  # as scripts/dev/build: the build directory
LAUNCH = os.path.join(BUILD, "tools", "hiercoll_launch")
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
PEERS = os.path.join(ROOT, ".peers")  # Intel MPI and MPICH from PyPI, each in its own prefix (bench-peers)
CLUSTER = os.path.join(ROOT, "scripts", "emulation", "cluster")  # the emulated cluster's script (up, down, status)
# The reports the scripts write into, section by section (docs/README.md): the tables a user compares; hiercoll beside
# every peer at every size and host state; the measurements behind the design.
BENCHMARKS_DOC = os.path.join(ROOT, "docs", "benchmarks.md")
PEERS_DOC = os.path.join(ROOT, "docs", "peers.md")
EXPERIMENTS_DOC = os.path.join(ROOT, "docs", "experiments.md")
# Open MPI from Debian's packages unpacked under this root instead of the system's: the lent GPU machine has none
# (scripts/dev/gpu-check unpacks them there). Its tools are then <collective>_perf_openmpi.
OPENMPI_ROOT = os.environ.get("HIERCOLL_OPENMPI_ROOT", "")


def openmpi_unpacked():
    """(the Open MPI prefix to build the *_perf_openmpi tools against, the environment its mpirun needs) for the
    packages unpacked under OPENMPI_ROOT. Debian's Open MPI relocates with OPAL_PREFIX; its PMIx, a package of its
    own, finds its components through PMIX_MCA_mca_base_component_path."""
    lib = os.path.join(OPENMPI_ROOT, "usr", "lib", "x86_64-linux-gnu")
    env = {"OPAL_PREFIX": os.path.join(OPENMPI_ROOT, "usr"),
           "PMIX_MCA_mca_base_component_path": os.path.join(lib, "pmix2", "lib", "pmix"),
           "PATH": os.path.join(OPENMPI_ROOT, "usr", "bin") + ":" + os.environ.get("PATH", ""),
           "LD_LIBRARY_PATH": lib + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
    return os.path.join(lib, "openmpi"), env


def physical_cores():
    """Cores this process may run on, hyperthreads of one core counted once (sysfs' thread siblings); the CPU count
    where sysfs does not say."""
    siblings = set()
    for cpu in os.sched_getaffinity(0):
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                siblings.add(f.read().strip())
        except OSError:
            return len(os.sched_getaffinity(0))
    return len(siblings)


def perf(collective, build=BUILD):
    return os.path.join(build, "bench", f"{collective}_perf")


def run(cmd, env=None):
    """Runs `cmd`, echoing it and its output to stderr; returns the output."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    sys.stderr.write(out)
    return out


def rows(output):
    """Rows of a *_perf table: size, algo, time and in-place time (µs), busbw and in-place busbw (GB/s), wrong
    results."""
    result = []
    for line in output.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        result.append({"size": int(f[0]), "algo": f[5], "time": float(f[6]), "busbw": float(f[8]),
                       "time_ip": float(f[10]), "busbw_ip": float(f[12]), "wrong": int(f[9]) + int(f[13])})
    return result


def launch_command(args, env=(), backend="hiercoll", collective="allreduce", layout=None, ranks=4, netns=True,
                   build=BUILD):
    """The command line that starts <collective>_perf `args` with hiercoll_launch: `ranks` ranks on loopback, or
    layout = (nodes, ranks per node) on the emulated cluster (which must be up; netns=False: nodes told apart by
    HIERCOLL_NODE_ID on loopback, the link unshaped). `env`: NAME=VALUE for every rank. `build`: the build directory
    whose launcher and tool run (another build of hiercoll's, to compare with this one)."""
    nodes, per_node = layout or (1, ranks)
    launcher = os.path.join(build, "tools", "hiercoll_launch")
    cmd = [launcher, "-n", str(nodes * per_node), "--ranks-per-node", str(per_node), "--tcp-store",
           "-x", "HIERCOLL_FABRIC_PROVIDER=tcp"]
    # Gloo unpinned, as torchrun starts it. Its device thread polls epoll while a message waits for its receive to
    # be posted (52-72% of a core per rank at 64 B); pinned beside the caller, 2 ranks' 64 B-4 KB allreduces took
    # 3.5-4.2 ms against 0.2-1.9 unpinned (2 runs each, 2026-11-26).
    cmd += ["--bind-to", "none"] if backend == "gloo" else []
    cmd += ["--netns", "hc"] if layout and netns else ["-x", "HIERCOLL_FABRIC_IFACE=lo"]
    if backend == "gloo" and layout and netns:
        # Gloo binds the address it is given (bench/perf/backend_gloo.cpp), by default 127.0.0.1, which in a node's
        # namespace no other node reaches: the nodes' NIC instead.
        cmd += ["-x", "HIERCOLL_FABRIC_IFACE=hcnic0"]
    for e in env:
        cmd += ["-x", e]
    return cmd + ["--", perf(collective, build), "--backend", backend] + args


def launch_output(args, env=(), backend="hiercoll", collective="allreduce", layout=None, ranks=4, netns=True,
                  build=BUILD):
    """The output of <collective>_perf `args`, started by hiercoll_launch (see launch_command)."""
    return run(launch_command(args, env, backend, collective, layout, ranks, netns, build))


def mpi_command(which, nodes, per_node, collective="allreduce"):
    """(command prefix, environment) that starts nodes x per_node ranks of the allreduce benchmark built against
    `which`: on this host (nodes == 1), or across the emulated cluster's namespaces (scripts/emulation/cluster, which must be
    up), each its own host name, TCP between them on their NIC, shared memory within one."""
    ranks = nodes * per_node
    oversubscribed = ranks > os.cpu_count()
    env = dict(os.environ)
    tool = perf(collective)
    rsh = os.path.join(ROOT, "scripts", "emulation", "netns-rsh")
    hosts = ",".join(f"hc{n}" for n in range(nodes))
    in_first_node = ["ip", "netns", "exec", "hc0"] if nodes > 1 else []
    if which == "open mpi":
        if nodes > 1:  # mpirun-cluster sets mpi_yield_when_idle where the nodes' ranks outnumber the cores
            env["MPIRUN_CLUSTER_BTL"] = "vader,tcp,self"
            cmd = [os.path.join(ROOT, "scripts", "emulation", "mpirun-cluster"), str(nodes), str(per_node), "--"]
        else:
            mpirun = "mpirun"
            if OPENMPI_ROOT:
                mpirun = os.path.join(OPENMPI_ROOT, "usr", "bin", "mpirun.openmpi")
                env.update(openmpi_unpacked()[1])
                tool += "_openmpi"
            cmd = [mpirun, "--allow-run-as-root", "-np", str(ranks)]
            cmd += ["--oversubscribe", "--mca", "mpi_yield_when_idle", "1"] if oversubscribed else []
            # Open MPI's slots are cores: ranks on every hyperthread of a machine need its hardware threads counted.
            cmd += ["--use-hwthread-cpus"] if not oversubscribed and ranks > physical_cores() else []
    elif which == "mpich":
        cmd = in_first_node + [os.path.join(PEERS, "mpich", "bin", "mpirun"), "-np", str(ranks)]
        if nodes > 1:
            # UCX, its network module, finds every "node" on one machine and would join them by shared memory;
            # on a real cluster it uses the network, so here it is held to TCP on the nodes' NIC.
            cmd += ["-launcher", "rsh", "-launcher-exec", rsh, "-iface", "hcnic0", "-hosts", hosts,
                    "-ppn", str(per_node)]
            env.update(UCX_TLS="tcp,self", UCX_NET_DEVICES="hcnic0")
        tool += "_mpich"
        # Its libmpi finds its own libfabric (newer than Debian's) through its runpath, which LD_LIBRARY_PATH comes
        # before: where that names another libfabric (the lent GPU machine's unpacked packages), MPICH's goes first.
        if env.get("LD_LIBRARY_PATH"):
            env["LD_LIBRARY_PATH"] = os.path.join(PEERS, "mpich", "lib", "mpich") + ":" + env["LD_LIBRARY_PATH"]
        if oversubscribed:
            env.update(MPIR_CVAR_CH4_PROGRESS_THROTTLE="1", MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT="10")
    else:
        prefix = os.path.join(PEERS, "impi")
        env.update(I_MPI_ROOT=prefix, I_MPI_FABRICS="shm", PATH=os.path.join(prefix, "bin") + ":" + env["PATH"])
        cmd = in_first_node + [os.path.join(prefix, "bin", "mpirun"), "-np", str(ranks)]
        if nodes > 1:
            # Each namespace looks like a node of its own to Intel MPI, which then neither sees the oversubscription
            # nor spreads the nodes' ranks over the cores: wait mode, unpinned (pinned it took 27 us for 8 B, not 15).
            cmd += ["-bootstrap", "rsh", "-bootstrap-exec", rsh, "-hosts", hosts, "-ppn", str(per_node)]
            env.update(I_MPI_FABRICS="shm:ofi", FI_PROVIDER="tcp", FI_TCP_IFACE="hcnic0", I_MPI_HYDRA_IFACE="hcnic0",
                       I_MPI_WAIT_MODE="1", I_MPI_PIN="0")
        tool += "_impi"
    return cmd + [tool, "--backend", "mpi"], env


def launched(sizes, env=(), backend="hiercoll", collective="allreduce", layout=None, ranks=4, netns=True,
             build=BUILD):
    """The rows of <collective>_perf (see launch_output)."""
    return rows(launch_output(sizes, env, backend, collective, layout, ranks, netns, build))


def ring_vs_hier(nodes, per_node, max_bytes, netns):
    """run-main's first part: the allreduce, flat ring and hierarchical, 1 MB to `max_bytes` on `nodes` x `per_node`
    ranks; prints both tables and the busbw ratio at the largest size."""
    busbw = {}
    for algo in ("ring", "hier"):
        print(f"# HIERCOLL_ALGO={algo}", file=sys.stderr, flush=True)
        series = checked(launched(["-b", "1M", "-e", max_bytes, "-f", "4", "-n", "5", "-w", "1"],
                                  [f"HIERCOLL_ALGO={algo}"], layout=(nodes, per_node), netns=netns), algo)
        busbw[algo] = series[-1]["busbw"]
    print(f"# largest size: busbw ring {busbw['ring']} GB/s, hier {busbw['hier']} GB/s, "
          f"hier/ring {busbw['hier'] / busbw['ring']:.2f}", flush=True)


def alternated(rounds, runs, machine=None, spread=1.5, retries=None):
    """Each of `runs` (name: a function giving a series), `rounds` times in turn, and per size the run of median
    time (its "times": every run's, fastest first). Small-message times on this 2-core VM move by 2x and more from
    run to run, for every backend alike, with where the host puts the two vCPUs: one cache line passes between them
    in 25-45 ns or in 250 (build/bench/core_handover, both seen on one day, each for minutes); one run each, in a row,
    compares two draws rather than two libraries.

    With `machine` (a function measuring the machine's state, e.g. that hand-over), it is measured before every run,
    and a round in which it moved by more than `spread` times is run again (up to `retries` more rounds, default
    `rounds`): its runs met different machines, so they compare nothing. Every backend's runs come from the same
    kept rounds. Returns (result, the kept rounds' states, how many rounds were run again) with `machine`, else the
    result alone."""
    draws = {name: [] for name in runs}
    states, kept, redone = [], 0, 0
    retries = rounds if retries is None else retries
    while kept < rounds:
        round_draws, round_states = {}, []
        for name, go in runs.items():
            if machine:
                round_states.append(machine())
            round_draws[name] = go()
        if machine and max(round_states) > spread * min(round_states) and redone < retries:
            redone += 1
            print(f"# the machine changed during this round ({min(round_states):.0f}-{max(round_states):.0f}): "
                  "run again", file=sys.stderr, flush=True)
            continue
        for name, series in round_draws.items():
            draws[name].append(series)
        states += round_states
        kept += 1
    result = {}
    for name, series in draws.items():
        merged = []
        for i, row in enumerate(series[0]):
            at_size = sorted((s[i] for s in series), key=lambda r: r["time"])
            merged.append(dict(at_size[len(at_size) // 2], wrong=sum(r["wrong"] for r in at_size),
                               times=[r["time"] for r in at_size]))  # every run's, fastest first
        result[name] = merged
    return (result, sorted(states), redone) if machine else result


def machine_state():
    """Where the host put this VM's two vCPUs, as two readings: one cache line handed between them, one way, in ns
    (build/bench/core_handover), and one core's memcpy rate into lines the other has just read, 1 MB copies, in GB/s
    (`build/bench/shared_writes --rate 1048576`). On this VM: two threads of one core, 15-30 ns and about 48 GB/s; two
    cores that share a cache, 45-65 ns and 11-17; no shared cache, 200-250 ns and 1.8-2.6. Each state lasts seconds
    to minutes, and memory-bound sizes move with it by 2x and more for every library alike. The second reading also
    tells apart a state the first misses: lines handed over quickly, but stores into lines the other core holds as
    slow as with no shared cache (docs/experiments.md, "Publishing into lines another core holds"). Quiet: measured
    around every run."""
    return handover_ns(), _reading(os.path.join(BUILD, "bench", "shared_writes"), "--rate", "1048576")


def _reading(*cmd):
    """The one number a bench/limits tool prints, without echoing it (these run around every run)."""
    return float(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)


def handover_ns():
    """One cache line handed between two pinned cores, one way (bench/limits/core_handover): the floor of a small
    allreduce on this host, which on a VM moves with where the host puts the vCPUs."""
    return _reading(os.path.join(BUILD, "bench", "core_handover"))


def state_name(readings):
    """The state that machine_state() readings taken around a run (before and after) say the run met; "mixed" where
    they disagree."""
    names = set()
    for handover, writes in readings:
        if handover > 150:
            names.add("far (no shared cache)")
        elif handover > 100:
            names.add("mixed")
        elif writes >= 30:
            names.add("one core (two hardware threads of one core)")
        elif writes >= 5:
            names.add("near (a shared cache)")
        else:
            names.add("near, slow writes (stores into lines the other core holds)")
    return names.pop() if len(names) == 1 else "mixed"


def bootstrap_interval(resample, draws=2000):
    """The 95% interval of `draws` draws of `resample()` (a statistic of data resampled with replacement): (low,
    high)."""
    values = sorted(resample() for _ in range(draws))
    return values[int(0.025 * draws)], values[int(0.975 * draws) - 1]


def human(b):
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if b >= scale:
            return f"{b // scale} {unit}"
    return f"{b} B"


def memcpy_gbps():
    """This host's memcpy rate now (GB/s of memory traffic, read plus write, of 32 MB copies: `hiercoll_micro
    --benchmark_filter=^BM_Memcpy/`): on a shared host it moves from day to day, and every one-host figure of
    memory-bound work moves with it."""
    out = run([os.path.join(BUILD, "bench", "hiercoll_micro"), "--benchmark_filter=^BM_Memcpy/",
               "--benchmark_format=json", "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true"])
    report = json.loads(out)
    median = [b for b in report["benchmarks"] if b.get("aggregate_name") == "median"]
    return (median or report["benchmarks"])[0]["bytes_per_second"] / 1e9


def kernels_table(repetitions=5):
    """The kernels' memory-traffic rates, each the median of `repetitions` runs in random order (memcpy's among
    them), so that a state change of a shared host's memory mid-run moves every row alike."""
    out = run([os.path.join(BUILD, "bench", "hiercoll_micro"), "--benchmark_filter=^BM_(Memcpy|Reduce)/",
               "--benchmark_min_time=0.2", f"--benchmark_repetitions={repetitions}",
               "--benchmark_enable_random_interleaving=true", "--benchmark_report_aggregates_only=true",
               "--benchmark_format=csv"])
    rates = {}
    for line in out.splitlines():
        if not line.startswith('"BM_'):
            continue
        f = next(csv.reader([line]))
        # name, iterations, real_time, cpu_time, time_unit, bytes_per_second, items_per_second, label, error...
        if len(f) > 8 and f[8] == "true":  # skipped: instruction set missing on this CPU
            continue
        if f[0].endswith("/real_time_median") or (repetitions == 1 and f[0].endswith("/real_time")):
            rates[f[0].split("/real_time")[0]] = (float(f[5]) if f[5] else 0.0, f[7])
    copy = rates.get("BM_Memcpy", (0, ""))[0]
    lines = [f"Medians of {repetitions} runs in random order (`hiercoll_micro --benchmark_repetitions={repetitions} "
             "--benchmark_enable_random_interleaving=true`), 32 MB buffers. Streaming stores write the result past "
             "the caches, as every kernel does from `HIERCOLL_STREAM_BYTES` (docs/tuning.md); \"forced\" rows show "
             "ordinary stores beside them.\n",
             "| kernel | GB/s of memory traffic | fraction of memcpy |", "|---|---|---|"]
    lines.append(f"| memcpy (read + write) | {copy / 1e9:.2f} | 1.00 |")

    def order(name):  # BM_Reduce/type/isa/stores, in the binary's order
        return [int(x) for x in name.split("/")[1:]]

    for name, (rate, label) in sorted(rates.items(), key=lambda item: order(item[0])):
        if name.startswith("BM_Reduce") and rate > 0:
            lines.append(f"| {label} (read 2 + write 1) | {rate / 1e9:.2f} | {rate / copy:.2f} |")
    return "\n".join(lines)


def torchrun(ranks):
    """The start of a torchrun command line for `ranks` processes on this host, with its environment: the build's
    torch binding importable, one thread per rank, every backend on loopback. --standalone: the rendezvous store
    binds a port the kernel assigns (a port found free first may be taken before it is bound)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), OMP_NUM_THREADS="1",
               HIERCOLL_FABRIC_PROVIDER="tcp", HIERCOLL_FABRIC_IFACE="lo", GLOO_SOCKET_IFNAME="lo")
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    return cmd, env


def checked(series, what):
    """`series` if every result in it was right; else stops the script naming `what`."""
    bad = [r for r in series if r["wrong"]]
    if bad:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {what} gave wrong results at {bad[0]['size']} bytes")
    return series


def section_text(lines):
    """`lines` joined as a document section: prose wrapped at the docs' 118 columns, table rows as they are."""
    return "\n".join(textwrap.fill(line, 118, break_on_hyphens=False, break_long_words=False)
                     if len(line) > 118 and not line.startswith("|") else line for line in lines)


def _markers(name):
    return f"<!-- {name}: begin -->", f"<!-- {name}: end -->"


def kept_sections(path):
    """The marked sections of the document at `path` (other scripts' parts), whole, in order."""
    text = open(path).read() if os.path.exists(path) else ""
    return [m.group(0) for m in re.finditer(r"<!-- ([\w-]+): begin -->.*?<!-- \1: end -->", text, re.S)]


def write_section(path, name, body):
    """Puts `body` between the `name` markers of the document at `path`, replacing what was there, or appends it."""
    begin, end = _markers(name)
    section = f"{begin}\n\n{body.strip()}\n\n{end}"
    text = open(path).read() if os.path.exists(path) else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)


# Measures the emulated link between hc0 and hc1 as a program sees it: half the median TCP round trip of 8 bytes, and
# the rate of one 64 MB bulk transfer.
PROBE = r"""
import socket, sys, time
addr = ("10.77.0.2", 5571)
if sys.argv[1] == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(addr); s.listen(2)
    for mode in ("ping", "bulk"):
        c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            d = c.recv(1 << 20)
            if not d: break
            if mode == "ping": c.sendall(d)
        c.close()
else:
    time.sleep(0.3)
    c = socket.create_connection(addr); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(200):
        t = time.perf_counter(); c.sendall(b"x" * 8); c.recv(64); rtts.append(time.perf_counter() - t)
    c.close(); rtts.sort()
    c = socket.create_connection(addr); block = b"x" * (1 << 20); t = time.perf_counter()
    for _ in range(64): c.sendall(block)
    c.shutdown(socket.SHUT_WR); c.recv(1)
    print(rtts[len(rtts) // 2] / 2 * 1e6, 64 * (1 << 20) / (time.perf_counter() - t) / 1e9)
"""


def probe_link():
    """(one-way latency in µs, bandwidth in GB/s) between the first two emulated nodes."""
    server = subprocess.Popen(["ip", "netns", "exec", "hc1", sys.executable, "-c", PROBE, "serve"])
    try:
        lat, bw = map(float, run(["ip", "netns", "exec", "hc0", sys.executable, "-c", PROBE, "probe"]).split())
    finally:
        server.wait(timeout=60)
    return lat, bw


def predict(nodes, local, link, byte_list, ranks_per_cpu=1.0):
    """hiercoll_sim's allreduce times (s) by (bytes, algorithm) on nodes x local ranks over `link` (probe_link's),
    shared memory at 4 GB/s and 20 µs per rank, `ranks_per_cpu` ranks sharing each core (the model's CPU term, at
    its default overhead per message)."""
    lat_us, gbps = link
    out = run([os.path.join(BUILD, "bench", "hiercoll_sim"), "allreduce", "--nodes", str(nodes), "--local", str(local),
               "--bytes", ",".join(str(b) for b in byte_list), "--net-gbps", str(gbps), "--net-lat-us", str(lat_us),
               "--intra-gbps", "4", "--intra-lat-us", "20", "--piece-bytes", "2M",
               "--ranks-per-cpu", str(ranks_per_cpu)])
    result = {}
    for line in out.splitlines()[1:]:
        n, l, b, algo, seconds, _ = line.split(",")
        result[(int(float(b)), algo)] = float(seconds)
    return result
