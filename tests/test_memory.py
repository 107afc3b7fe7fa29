"""Free memory and the refusal of work that does not fit (attnscale.memory)."""

import os

import pytest
import torch

from attnscale import memory


def test_free_memory_is_positive_and_at_most_the_machines():
    free = memory.available_bytes()
    total = None
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
    assert free is not None and 0 < free <= total


def test_the_limit_variable_caps_free_memory(monkeypatch):
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "3M")
    assert memory.available_bytes() == 3 * 2**20
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "1000")
    assert memory.available_bytes() == 1000


@pytest.mark.parametrize("text, value", [("2G", 2 * 2**30), ("512M", 512 * 2**20), ("1.5k", 1536), ("10", 10),
                                         ("4GiB", 4 * 2**30), (" 3 T ", 3 * 2**40)])
def test_sizes_parse(text, value):
    assert memory.parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-1G", "2X", "1e9"])
def test_bad_sizes_name_the_variable(text):
    with pytest.raises(ValueError, match=memory.LIMIT_VARIABLE):
        memory.parse_bytes(text)


def test_require_memory_refuses_with_one_line_saying_how_much_and_how_to_shrink(monkeypatch):
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "100M")
    memory.require_memory(50 * 10**6, "small", "n/a")  # fits in 90% of 104.9 MB
    with pytest.raises(ValueError) as refused:
        memory.require_memory(3_200_000_000, "the (20000, 20000) logits", "use fewer tokens")
    message = str(refused.value)
    assert message == "the (20000, 20000) logits would need 3.2 GB, but only 104.9 MB is free; use fewer tokens"
    assert "\n" not in message


def test_usable_share_is_the_margin(monkeypatch):
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "1000")
    memory.require_memory(900, "x", "y")
    assert memory.fits(900) and not memory.fits(901)
    with pytest.raises(ValueError):
        memory.require_memory(901, "x", "y")


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10", None])
def test_require_memory_takes_a_byte_count(bad):
    with pytest.raises(ValueError, match="bytes_needed"):
        memory.require_memory(bad, "x", "y")


def test_tensor_bytes_is_numel_times_element_size():
    assert memory.tensor_bytes((3, 4), torch.float16) == torch.empty(3, 4, dtype=torch.float16).nbytes
    assert memory.tensor_bytes((20000, 20000), torch.float64) == 3_200_000_000
    assert memory.tensor_bytes((), torch.float32) == 4
    with pytest.raises(ValueError):
        memory.tensor_bytes((2, -1))


@pytest.mark.parametrize("count, text", [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (3_200_000_000, "3.2 GB"),
                                         (1.5e13, "15.0 TB")])
def test_format_bytes(count, text):
    assert memory.format_bytes(count) == text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA GPU"):
        memory.available_bytes("cuda")


def test_audit_refuses_what_cannot_fit_and_blocks_what_can(monkeypatch):
    from attnscale import numerics

    monkeypatch.setenv(memory.LIMIT_VARIABLE, "50M")
    with pytest.raises(ValueError, match="1 queries x 200000 keys .* would need"):
        numerics.check_block_rows(1, 200_000, 8)
    rows = numerics.check_block_rows(20_000, 20_000, 1)  # 3.2 GB per full matrix: taken in row blocks
    assert 1 <= rows < 20_000
    assert rows * numerics.AUDIT_MATRICES * 20_000 * 8 <= memory.USABLE_SHARE * 50 * 2**20


def test_a_module_too_big_for_memory_is_refused_before_allocating(monkeypatch):
    from attnscale import ScaledAttention

    monkeypatch.setenv(memory.LIMIT_VARIABLE, "1M")
    with pytest.raises(ValueError, match=r"ScaledAttention\(d_model=1024, n_heads=8, d_head=64\) would need 8.4 MB"):
        ScaledAttention(1024, 8, 64)


@pytest.mark.parametrize("impl", ["naive", "stable"])
def test_dense_attention_too_big_for_memory_is_refused_before_allocating(monkeypatch, impl):
    """The dense impls hold 3 (T_q, T_k) score matrices: 3,000 x 3,000 keys in float32 is 108 MB, refused under a
    50 MiB limit with the size and the tiled impl named; the tiled one runs on the same inputs."""
    from attnscale import attention

    monkeypatch.setenv(memory.LIMIT_VARIABLE, "50M")
    q = torch.randn(1, 1, 3000, 8)
    with pytest.raises(ValueError, match=rf"impl='{impl}' on 3000 queries and 3000 keys .* would need 108.0 MB, "
                                         r"but only 52\.4 MB is free; use impl='online'"):
        attention(q, q, q, impl=impl, return_weights=True)
    assert attention(q, q, q, impl="online").shape == q.shape


# ----------------------------------------------------------------------------- worker processes

def test_workers_that_fit_count_each_process_and_the_largest_jobs_in_flight(monkeypatch):
    """Usable is 90% of 1000 MB = 900 MB; each process costs 200 MB, jobs go largest first."""
    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(1000 * 10**6))
    per = 200 * 10**6
    assert memory.workers_that_fit(8, per_worker=per) == 4  # 4 x 200 = 800 <= 900 < 1000
    assert memory.workers_that_fit(3, per_worker=per) == 3
    jobs = [100 * 10**6, 300 * 10**6, 50 * 10**6]
    assert memory.workers_that_fit(3, jobs, per_worker=per) == 2  # 3 x 200 + 450 > 900 >= 2 x 200 + 400
    assert memory.workers_that_fit(2, [800 * 10**6], per_worker=per) == 0  # not even one


def test_a_sweep_with_more_workers_than_memory_holds_is_refused_naming_the_most_that_fit(monkeypatch):
    from attnscale import runs
    from attnscale.train import RunSpec
    from attnscale.train.spec import memory_estimate

    specs = [RunSpec(task="recall", d_head=8, d_model=16, steps=10, log_every=5, batch_size=8, seed=seed)
             for seed in range(8)]
    group = memory_estimate(specs[0], 1)
    room = 3 * (memory.WORKER_PROCESS_BYTES + group) + memory.WORKER_PROCESS_BYTES // 2  # 3 fit, not 4
    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(int(room / memory.USABLE_SHARE) + 1))
    with pytest.raises(ValueError, match=r"8 group\(s\).* in 8 worker processes .*use --workers 3 or fewer"):
        runs.execute(specs, workers=8, batch_runs=1)
    # a default of 8 (one per core on an 8-core machine) is cut to what fits instead
    todo = {runs.run_key(s): runs.spec_dict(s) for s in specs}
    groups = runs.plan_groups(todo, batch_runs=1, workers=8)
    assert runs.workers_for_memory(8, groups, todo) == 3
    runs.check_memory(groups, todo, 3)  # and those fit


def test_audit_workers_chosen_beyond_memory_are_refused_and_the_default_is_cut(monkeypatch):
    from attnscale.audit import pipeline

    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(int(2.5 * pipeline.AUDIT_WORKER_BYTES / memory.USABLE_SHARE)))
    with pytest.raises(ValueError, match=r"4 audit worker processes .*use --workers 2 or fewer"):
        pipeline.workers_within_memory(4, chosen=True)
    assert pipeline.workers_within_memory(4, chosen=False) == 2
    assert pipeline.workers_within_memory(2, chosen=True) == 2
    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(pipeline.AUDIT_WORKER_BYTES // 2))
    assert pipeline.workers_within_memory(4, chosen=False) == 1  # this process alone


def test_the_reports_side_labs_run_in_as_many_workers_as_memory_holds(monkeypatch):
    from attnscale.report import build

    monkeypatch.setattr(build, "default_workers", lambda: 4)
    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(int(2.5 * build.SIDE_LAB_WORKER_BYTES / memory.USABLE_SHARE)))
    assert build.side_workers(8) == 2 and build.side_workers(1) == 1
    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(build.SIDE_LAB_WORKER_BYTES))
    assert build.side_workers(8) == 0  # not even one: the side labs run in the report's own process


def test_a_kept_pool_shrinks_to_what_memory_holds_with_its_share_of_the_cores(monkeypatch):
    from attnscale import runs

    monkeypatch.setattr(runs, "default_workers", lambda: 8)
    kept = runs.KeptPool(8)
    assert (kept.workers, kept.threads) == (8, 1)
    kept.shrink(3)
    assert (kept.workers, kept.threads) == (3, 2)
    chosen = runs.KeptPool(8, threads=1)
    chosen.shrink(2)
    assert (chosen.workers, chosen.threads) == (2, 1)  # threads the caller chose stay


def test_audit_workers_are_counted_only_where_the_audit_would_spread_its_families(monkeypatch):
    """A few families are audited in this process whatever --workers says, so no worker is sized for them."""
    from attnscale.audit import pipeline

    assert pipeline.parallel_workers(["gpt2"] * 8, 2) == 1 and pipeline.parallel_workers(["gpt2"] * 9, 2) == 2
    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(pipeline.AUDIT_WORKER_BYTES // 2))
    assert pipeline.workers_within_memory(pipeline.parallel_workers(["gpt2"], 8), chosen=True) == 1


# ----------------------------------------------------------------------------- limits beyond free memory

def test_the_tightest_cgroup_on_the_way_up_caps_free_memory(tmp_path, monkeypatch):
    """A job's cgroup inside a container's: the limit can sit on any folder above the process's own (v1 and v2
    alike); the least room of them all counts."""
    v2, v1 = tmp_path / "cgroup", tmp_path / "cgroup" / "memory"
    own = v1 / "jobs" / "job7"
    own.mkdir(parents=True)
    for folder, limit, usage in ((own, "9223372036854771712", "1000"), (v1 / "jobs", str(300 * 2**20), str(100 * 2**20)),
                                 (v1, "9223372036854771712", "5")):
        (folder / "memory.limit_in_bytes").write_text(limit)
        (folder / "memory.usage_in_bytes").write_text(usage)
    proc = tmp_path / "cgroup-of-self"
    proc.write_text("4:memory:/jobs/job7\n1:cpu:/\n0::/\n")
    monkeypatch.setattr(memory, "CGROUP_V2", v2)
    monkeypatch.setattr(memory, "CGROUP_V1", v1)
    monkeypatch.setattr(memory, "CGROUP_FILES", {v2: ("memory.max", "memory.current"),
                                                 v1: ("memory.limit_in_bytes", "memory.usage_in_bytes")})
    assert memory._cgroup_folders(proc) == [own, v1 / "jobs", v1, v2]
    monkeypatch.setattr(memory, "_cgroup_folders", lambda: [own, v1 / "jobs", v1, v2])
    assert memory._cgroup_room() == 200 * 2**20
    (v2 / "memory.max").write_text(str(50 * 2**20))  # the unified hierarchy's limit is tighter still
    (v2 / "memory.current").write_text(str(2**20))
    assert memory._cgroup_room() == 49 * 2**20
    assert memory.available_bytes() <= 49 * 2**20


UNDER_RLIMIT_AS = """
import resource, sys, torch
from attnscale import memory, attention, ScaledAttention
used = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (used + 400 * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))
print("free", memory.available_bytes() <= 400 * 2**20)
q = torch.randn(1, 1, 8000, 8)
for name, call in (("naive", lambda: attention(q, q, q, impl="naive")),
                   ("stable", lambda: attention(q, q, q, impl="stable")),
                   ("module", lambda: ScaledAttention(8192, 8, 1024))):
    try:
        call()
        print(name, "ran")
    except ValueError as error:
        print(name, "refused:", str(error).splitlines()[0])
    except BaseException as error:
        print(name, "crashed:", type(error).__name__)
print(attention(q, q, q, impl="online").shape)
"""


def test_under_an_address_space_limit_large_work_is_refused_in_words():
    """``ulimit -v``: the machine has gigabytes free, the process 400 MB of address space left. Dense attention on
    8,000 keys (768 MB of score matrices) and a 2.1 GB module are refused with the promised ValueError, not
    torch's allocator error; the tiled impl still runs."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", UNDER_RLIMIT_AS], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    free, *lines = run.stdout.splitlines()
    assert free == "free True"
    assert [line.split(":")[0] for line in lines[:3]] == ["naive refused", "stable refused", "module refused"], lines
    assert all("would need" in line for line in lines[:3]) and lines[3] == "torch.Size([1, 1, 8000, 8])"


PROBE_UNDER_A_LIMIT = """
import math, resource, sys, torch
from torch import nn
import attnscale

class Attn(nn.Module):
    def __init__(self, d=256, h=4):
        super().__init__(); self.h = h; self.qkv = nn.Linear(d, 3 * d); self.o = nn.Linear(d, d)
    def forward(self, x):
        B, T, D = x.shape
        q, k, v = [t.view(B, T, self.h, -1).transpose(1, 2) for t in self.qkv(x).split(D, -1)]
        w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1)
        return self.o((w @ v).transpose(1, 2).reshape(B, T, D))

torch.manual_seed(0)
model = nn.Sequential(*[Attn() for _ in range(8)]).eval()
x = torch.randn(2, 512, 256)
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
with torch.no_grad():
    try:
        print(attnscale.probe(model, x).summary())
    except ValueError as error:
        print("refused:", error)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - start) / 2**20)
"""


@pytest.mark.parametrize("limit_mib", [150, 300, 1000])
def test_probing_a_module_stays_within_the_memory_limit(limit_mib):
    """``attnscale.probe`` / ``audit --module`` on 8 attention layers at 2 x 512 tokens: it keeps each product's
    output and reads each call in float64 (beside the forward's own tensors). Under a limit it either finishes or
    is refused in words, and its peak growth stays within the limit (it went 2.5-5x past it when it kept every
    product's inputs and every softmax's logits to read them after the forward)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", PROBE_UNDER_A_LIMIT], capture_output=True, text=True, timeout=300,
                         env={**os.environ, memory.LIMIT_VARIABLE: f"{limit_mib}M"})
    assert run.returncode == 0, run.stderr
    verdict, grown_mib = run.stdout.splitlines()
    assert float(grown_mib) <= limit_mib, (verdict, grown_mib)
    if limit_mib >= 1000:
        assert verdict == "ok: 8 of 8 attention modules measured"
    else:
        assert verdict.startswith("refused: reading this module's attention") and "smaller input" in verdict
