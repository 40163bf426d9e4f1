"""gpumem.torch's regions and its torch_memory_saver facade without a GPU: PyTorch's allocations
(through the allocator library, as PyTorch makes them) tagged by region, paused and resumed at the
same addresses over the host stand-in, against the fake `torch` module of test_torch_allocator."""

from test_torch_allocator import fake_torch, run  # noqa: F401  (fake_torch is a fixture)

MiB = 1 << 20

PRELUDE = """
import ctypes, torch, gpumem, gpumem.torch as gt
host = gpumem.HostRuntime(capacity_bytes=256 << 20)
lib = gt._library()
MiB = 1 << 20

def malloc(n):
    p = lib.gpumem_torch_try_malloc(n, 0, None)
    assert p, gt._last_error()
    return p

def free(p, n):
    lib.gpumem_torch_free(p, n, 0, None)
"""


def check(code, env):
    out = run(PRELUDE + code, env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_the_facade_tags_pauses_and_resumes_pytorchs_allocations(fake_torch):
    out = check("""
res = gt.use_regions(runtime=host, reserve_bytes=64 * MiB)
assert gt.region_resource() is res and gt.torch_memory_saver.enabled
saver = gt.torch_memory_saver
with saver.region("weights", enable_cpu_backup=True):
    w = malloc(4 * MiB)
with saver.region("kv"):
    kv = malloc(8 * MiB)
    with saver.disable():
        plain = malloc(MiB)
ctypes.memset(w, 0x5A, 4 * MiB)
ctypes.memset(plain, 0x11, MiB)
print(gt.regions(), saver.tags())
saver.pause()
print(saver.state("weights"), saver.state("kv"), res.state("default"))
saver.pause()  # again: nothing changes
with saver.region("kv"):
    assert not lib.gpumem_torch_try_malloc(MiB, 0, None)
    error = gt._last_error()  # (with PyTorch's c10, a backtrace follows on more lines)
    print("paused:", "the pool is paused (discarded)" in error and "call resume() first" in error,
          error.startswith("gpumem: vmm_pool_memory_resource: cannot allocate 1.00 MiB"))
q = malloc(MiB)  # outside the tags: works while they sleep
free(kv, 8 * MiB)  # freeing while paused works
saver.resume()
print(saver.state("weights"), saver.state("kv"))
print(ctypes.string_at(w, 4 * MiB) == b"\\x5a" * (4 * MiB),
      ctypes.string_at(plain, MiB) == b"\\x11" * MiB)
with saver.region("kv"):
    kv2 = malloc(2 * MiB)
for p, n in ((w, 4 * MiB), (plain, MiB), (q, MiB), (kv2, 2 * MiB)):
    free(p, n)
res.check_invariants()
print("allocated", gt.memory_allocated())
""", fake_torch).splitlines()
    assert out[0] == "['default', 'saver:kv', 'saver:weights'] ['kv', 'weights']"
    assert out[1] == "paused_offloaded paused_discarded active"
    assert out[2] == "paused: True True"
    assert out[3] == "active active"
    assert out[4] == "True True"  # the backed-up tag has its bytes; the untagged one was untouched
    assert out[5] == "allocated 0"


def test_region_pause_and_resume_of_gpumem_torch(fake_torch):
    out = check("""
res = gt.use_regions(runtime=host, reserve_bytes=64 * MiB)
with gt.region("a"):
    a = malloc(3 * MiB)
    with gt.region("b"):
        b = malloc(MiB)
ctypes.memset(a, 0x42, 3 * MiB)
print(gt.pause("a", offload=True), gt.pause("a"), res.state("a"), res.state("b"))
print(gt.resume(), ctypes.string_at(a, 3 * MiB) == b"B" * (3 * MiB))
free(a, 3 * MiB); free(b, MiB)
res.check_invariants()
""", fake_torch).splitlines()
    assert out == ["1 0 paused_offloaded active", "1 True"]


def test_misuse_is_refused_with_a_reason(fake_torch):
    out = check("""
def says(f):
    try:
        f()
    except (ValueError, RuntimeError) as e:
        print(type(e).__name__ + ":", e)

saver = gt.torch_memory_saver
gt.use("pool", runtime=host)
says(lambda: gt.region("x"))
says(lambda: saver.region("x").__enter__())
""", fake_torch).splitlines()
    assert out[0].startswith("RuntimeError: gpumem.torch.region: PyTorch does not allocate from a "
                             "gpumem region resource on device 0 (gpumem.torch.use() installed "
                             "every device: pool)")
    assert "use_regions()" in out[0]
    assert out[1].startswith("RuntimeError: gpumem.torch.torch_memory_saver")


def test_a_tag_is_paused_one_way_and_unknown_tags_are_named(fake_torch):
    out = check("""
saver = gt.torch_memory_saver
gt.use_regions(runtime=host, reserve_bytes=16 * MiB)
with saver.region("w", enable_cpu_backup=True):
    pass
for f in (lambda: saver.region("w").__enter__(), lambda: saver.pause("nope"),
          lambda: saver.region("").__enter__(), lambda: setattr(saver, "hook_mode", "x")):
    try:
        f()
    except ValueError as e:
        print(e)
saver.hook_mode = "preload"
print(saver.hook_mode)
""", fake_torch).splitlines()
    assert out[0].startswith("tag 'w' was used with enable_cpu_backup=True")
    assert out[1] == "no region was opened with tag 'nope' (tags: 'w')"
    assert out[2] == "a tag must be a non-empty string, got ''"
    assert out[3].startswith("hook_mode: expected 'torch' or 'preload'")
    assert out[4] == "preload"


def test_errors_of_a_resource_object_reach_pytorch_as_errors(fake_torch):
    """The package's extension and the allocator library each have their own C++ runtime: an
    exception from a resource object given to use() used to abort the process."""
    out = check("""
res = gpumem.VmmPoolMemoryResource(reserve_bytes=16 * MiB, runtime=host)
gt.use(res)
p = malloc(MiB)
print(lib.gpumem_torch_try_malloc(64 * MiB, 0, None), gt._last_error().splitlines()[0])
res.pause()
print(lib.gpumem_torch_try_malloc(MiB, 0, None), "paused" in gt._last_error())
res.resume()
free(p, MiB)
print(gt.memory_stats()["num_ooms"], lib.gpumem_torch_get_resource(0) == res._handle)
""", fake_torch).splitlines()
    assert out[0].startswith("None ") and "out of memory" in out[0].lower(), out[0]
    assert out[1] == "None True"
    assert out[2] == "1 True"


def test_empty_cache_and_an_out_of_memory_retry_give_back_the_regions_free_memory(fake_torch):
    """What a region's pool keeps mapped after its tensors are freed goes back at empty_cache,
    and before an allocation that ran out of device memory is tried again."""
    out = check("""
small = gpumem.HostRuntime(capacity_bytes=32 * MiB)
res = gt.use_regions(runtime=small, reserve_bytes=64 * MiB)
with gt.region("a"):
    p = malloc(24 * MiB)
free(p, 24 * MiB)
print(res.stats("a")["mapped_bytes"] >= 24 * MiB)
with gt.region("b"):  # 8 MiB of device left: region a's free memory must go back first
    q = malloc(24 * MiB)
stats = gt.memory_stats()
print(stats["num_alloc_retries"], stats["num_ooms"], res.stats("a")["mapped_bytes"])
free(q, 24 * MiB)
print(res.stats("b")["mapped_bytes"] >= 24 * MiB)
gt.empty_cache()
print(res.stats("b")["mapped_bytes"])
""", fake_torch).splitlines()
    assert out == ["True", "1 0 0", "True", "0"], out
