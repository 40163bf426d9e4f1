// What the virtual-memory pool's slow paths cost: the driver's cuMem* calls (create + release,
// map, set access, unmap) at the handle sizes the pool uses, and an idle device synchronization.
// On a GPU these are the real calls; without one, the host stand-in's (so that CI runs the code;
// the times then mean nothing, and the rows that call the driver directly use the stand-in too).
//
// Method. The benchmark's thread makes device 0's primary context current before its first call,
// as any program that has made a CUDA runtime call has it. Each call is timed alone with
// steady_clock, around that call only; a row's Time is the sum of the calls it names (manual
// time), and its columns give each call's mean (map_us, access_us, unmap_us) and the median
// cycle (cycle_p50_us). Each row runs a fixed number of iterations, so the binary's run time is
// bounded (a few seconds on a GPU, even where a call takes a millisecond).
//
// Rows:
//   create_release/<MiB>, map_many_one_access/<handles>, idle_device_synchronize
//   cycle/<MiB>:       one handle mapped, given access and unmapped again at one address
//   side_by_side/<round>/<seam|driver>: 16 MiB, 30 cycles at fresh addresses of a 64-handle
//                      reservation, through gpumem's runtime seam and through the driver's entry
//                      points called directly, alternately, in one process
//   suspect/<what>:    the 16 MiB cycle with one thing changed from cycle/16, to find what can
//                      make a cycle cost ~1 ms instead of tens of microseconds (see `suspects`)
//   growth_threads/<MiB>/<threads>: 1 GiB made ready (create + map, one access grant per thread
//                      over its share) by 1 to 8 threads at once: whether growth gains from doing
//                      the driver calls in parallel (wall time; us_per_handle)
#include <gpumem/runtime.hpp>
#include <gpumem/simulated_device.hpp>

#include <benchmark/benchmark.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::bench {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
using clock_type          = std::chrono::steady_clock;

bool on_gpu()
{
  static bool const gpu = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) { return true; }
    (void)cudaGetLastError();
    return false;
  }();
  return gpu;
}

/// The runtime measured. On a GPU, device 0's primary context is made current on the calling (the
/// benchmark's) thread first: cudaGetDeviceCount alone makes none, and the driver's set-access and
/// unmap calls on a thread without a current context cost about 1 ms each (suspect/no_context_*).
gpumem::runtime& rt()
{
  static gpumem::runtime* r = [] {
    if (on_gpu()) {
      (void)cudaSetDevice(0);
      (void)cudaFree(nullptr);
      return &gpumem::cuda_device();
    }
    return static_cast<gpumem::runtime*>(new gpumem::simulated_device{});  // never destroyed
  }();
  return *r;
}

double since_us(clock_type::time_point t0)
{
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// -- the calls, through gpumem's runtime seam or to the driver directly ------------------------

/// The virtual-memory calls a cycle makes. Failures throw std::runtime_error naming the call.
class vmm_calls {
 public:
  vmm_calls()                            = default;
  vmm_calls(vmm_calls const&)            = delete;
  vmm_calls& operator=(vmm_calls const&) = delete;
  virtual ~vmm_calls()                   = default;

  [[nodiscard]] virtual char const* name() const noexcept                                 = 0;
  [[nodiscard]] virtual void* reserve(std::size_t bytes)                                  = 0;
  virtual void unreserve(void* base, std::size_t bytes)                                   = 0;
  [[nodiscard]] virtual vmm_handle create(std::size_t bytes, vmm_handle_properties props) = 0;
  virtual void release(vmm_handle h)                                                      = 0;
  virtual void map(void* at, std::size_t bytes, vmm_handle h)                             = 0;
  virtual void set_access(void* at, std::size_t bytes, int device)                        = 0;
  virtual void unmap(void* at, std::size_t bytes)                                         = 0;
  /// Whether the calling thread has a current context ("host" where there is no driver).
  [[nodiscard]] virtual std::string context_here() = 0;
};

/// Through gpumem's runtime seam (what vmm_pool calls).
class seam_calls final : public vmm_calls {
 public:
  [[nodiscard]] char const* name() const noexcept override { return rt().name(); }
  void* reserve(std::size_t bytes) override { return rt().vmm_reserve(bytes, granularity()); }
  void unreserve(void* base, std::size_t bytes) override { rt().vmm_unreserve(base, bytes); }
  vmm_handle create(std::size_t bytes, vmm_handle_properties props) override
  {
    return rt().vmm_create(bytes, 0, props);
  }
  void release(vmm_handle h) override { rt().vmm_release(h); }
  void map(void* at, std::size_t bytes, vmm_handle h) override { rt().vmm_map(at, bytes, h); }
  void set_access(void* at, std::size_t bytes, int device) override
  {
    rt().vmm_set_access(at, bytes, device);
  }
  void unmap(void* at, std::size_t bytes) override { rt().vmm_unmap(at, bytes); }
  std::string context_here() override;

 private:
  static std::size_t granularity()
  {
    static std::size_t const g = rt().vmm_granularity(0);
    return g;
  }
};

/// The driver's cuMem* entry points called directly, not through gpumem (looked up through
/// cudart, as gpumem does, so that the binary does not link libcuda).
class driver_calls final : public vmm_calls {
 public:
  /// The entry points; nullptr where there is no GPU or the driver lacks one.
  [[nodiscard]] static driver_calls* get();

  [[nodiscard]] char const* name() const noexcept override { return "driver"; }
  void* reserve(std::size_t bytes) override
  {
    CUdeviceptr base{};
    check(address_reserve_(&base, bytes, granularity(), 0, 0), "cuMemAddressReserve");
    return reinterpret_cast<void*>(base);
  }
  void unreserve(void* base, std::size_t bytes) override
  {
    check(address_free_(ptr(base), bytes), "cuMemAddressFree");
  }
  vmm_handle create(std::size_t bytes, vmm_handle_properties props) override
  {
    auto const p = prop(props);
    CUmemGenericAllocationHandle h{};
    check(create_(&h, bytes, &p, 0), "cuMemCreate");
    return h;
  }
  void release(vmm_handle h) override { check(release_(h), "cuMemRelease"); }
  void map(void* at, std::size_t bytes, vmm_handle h) override
  {
    check(map_(ptr(at), bytes, 0, h, 0), "cuMemMap");
  }
  void set_access(void* at, std::size_t bytes, int device) override
  {
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id   = device;
    d.flags         = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(set_access_(ptr(at), bytes, &d, 1), "cuMemSetAccess");
  }
  void unmap(void* at, std::size_t bytes) override { check(unmap_(ptr(at), bytes), "cuMemUnmap"); }
  std::string context_here() override
  {
    CUcontext c{};
    CUdevice dev{};
    unsigned flags{};
    int active{};
    auto const current = ctx_get_current_(&c) == CUDA_SUCCESS && c != nullptr;
    auto const primary = device_get_(&dev, 0) == CUDA_SUCCESS &&
                         primary_state_(dev, &flags, &active) == CUDA_SUCCESS && active != 0;
    return std::string{current ? "context current" : "no context current"} +
           (primary ? " (primary active)" : " (primary inactive)");
  }

 private:
  static CUdeviceptr ptr(void* p) { return reinterpret_cast<CUdeviceptr>(p); }
  static void check(CUresult r, char const* call)
  {
    if (r != CUDA_SUCCESS) {
      throw std::runtime_error{std::string{call} + " failed: CUresult " + std::to_string(r)};
    }
  }
  static CUmemAllocationProp prop(vmm_handle_properties props)
  {
    CUmemAllocationProp p{};
    p.type          = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id   = 0;
    p.requestedHandleTypes =
        props.shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    p.allocFlags.gpuDirectRDMACapable = props.gpu_direct_rdma ? 1 : 0;
    return p;
  }
  std::size_t granularity()
  {
    if (granularity_ == 0) {
      auto const p = prop({});
      check(granularity_of_(&granularity_, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
            "cuMemGetAllocationGranularity");
    }
    return granularity_;
  }
  bool load();

  std::size_t granularity_{};
  CUresult (*address_reserve_)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr,
                               unsigned long long){};
  CUresult (*address_free_)(CUdeviceptr, std::size_t){};
  CUresult (*create_)(CUmemGenericAllocationHandle*, std::size_t, CUmemAllocationProp const*,
                      unsigned long long){};
  CUresult (*release_)(CUmemGenericAllocationHandle){};
  CUresult (*map_)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle,
                   unsigned long long){};
  CUresult (*set_access_)(CUdeviceptr, std::size_t, CUmemAccessDesc const*, std::size_t){};
  CUresult (*unmap_)(CUdeviceptr, std::size_t){};
  CUresult (*granularity_of_)(std::size_t*, CUmemAllocationProp const*,
                              CUmemAllocationGranularity_flags){};
  CUresult (*ctx_get_current_)(CUcontext*){};
  CUresult (*device_get_)(CUdevice*, int){};
  CUresult (*primary_state_)(CUdevice, unsigned*, int*){};
};

template <class Fn>
bool entry_point(Fn& fn, char const* symbol)
{
  void* p{};
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      p == nullptr) {
    (void)cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

bool driver_calls::load()
{
  return entry_point(address_reserve_, "cuMemAddressReserve") &&
         entry_point(address_free_, "cuMemAddressFree") && entry_point(create_, "cuMemCreate") &&
         entry_point(release_, "cuMemRelease") && entry_point(map_, "cuMemMap") &&
         entry_point(set_access_, "cuMemSetAccess") && entry_point(unmap_, "cuMemUnmap") &&
         entry_point(granularity_of_, "cuMemGetAllocationGranularity") &&
         entry_point(ctx_get_current_, "cuCtxGetCurrent") &&
         entry_point(device_get_, "cuDeviceGet") &&
         entry_point(primary_state_, "cuDevicePrimaryCtxGetState");
}

driver_calls* driver_calls::get()
{
  static driver_calls* const instance = []() -> driver_calls* {
    if (!on_gpu()) { return nullptr; }
    auto d = std::make_unique<driver_calls>();
    return d->load() ? d.release() : nullptr;  // never destroyed
  }();
  return instance;
}

std::string seam_calls::context_here()
{
  auto* d = driver_calls::get();
  return d != nullptr ? d->context_here() : "host";
}

/// The driver's calls where there is a GPU, else the seam's (the host stand-in).
vmm_calls& calls_for(bool driver)
{
  static seam_calls seam;
  (void)driver_calls::get();  // looked up here, not first on a thread that must have no context
  if (driver && driver_calls::get() != nullptr) { return *driver_calls::get(); }
  return seam;
}

// -- one cycle, and the variants that change one thing about it -------------------------------

enum class timing {
  manual,  ///< steady_clock around each call; the row's time is their sum (the default)
  loop,    ///< Google Benchmark's clock over the whole iteration (the old method)
  pause,   ///< Google Benchmark's clock, with PauseTiming/ResumeTiming in each iteration
};

/// Process state made before the cycles (on a GPU), the device's context then holding more.
enum class extra_state { none, async_pool, mapped_host, big_allocation };

struct variant {
  std::size_t handle_mib{16};
  int iterations{200};
  bool driver{};  ///< the driver's entry points called directly, not the seam
  /// On the benchmark's thread before anything made a context in the process (the first row;
  /// the driver's entry points only): the state the benchmark's thread used to be in.
  bool before_any_context{};
  bool fresh_thread{};      ///< on a new thread that has made no CUDA call (no current context)
  bool access{true};        ///< false: map + unmap only
  bool fresh_addresses{};   ///< cycle through 64 addresses instead of one
  bool reserve_each{};      ///< a reservation made and freed around each cycle
  bool huge_reservation{};  ///< inside twice the device's memory of address space (as vmm_pool)
  int neighbours{};  ///< handles mapped, with access, beside the cycled one (not with reserve_each)
  bool all_peers{};  ///< access granted to every device with peer capability as well
  bool sync_between{};  ///< an idle device synchronization between cycles (untimed)
  vmm_handle_properties properties{};
  timing how{timing::manual};
  extra_state extra{extra_state::none};
};

struct cycle_times {
  double map{}, access{}, unmap{};
  [[nodiscard]] double total() const { return map + access + unmap; }
};

/// What the cycles run in: a reservation, the cycled handle and its neighbours.
class cycle_setup {
 public:
  static constexpr std::size_t slots = 64;  // addresses the fresh-address cycle goes through

  cycle_setup(vmm_calls& c, variant const& v)
      : c_{c}, v_{v}, each_{v.handle_mib * MiB}, bytes_{reservation_bytes()}
  {
    if (!v_.reserve_each) { base_ = c_.reserve(bytes_); }
    handle_ = c_.create(each_, v_.properties);
    for (int i = 0; i < v_.neighbours; ++i) { add_neighbour(); }
    peers_ = v_.all_peers ? peer_devices() : std::vector<int>{};
  }
  cycle_setup(cycle_setup const&)            = delete;
  cycle_setup& operator=(cycle_setup const&) = delete;
  ~cycle_setup()
  {
    try {
      for (auto const& [at, h] : neighbours_) {
        c_.unmap(at, each_);
        c_.release(h);
      }
      c_.release(handle_);
      if (base_ != nullptr) { c_.unreserve(base_, bytes_); }
    } catch (std::exception const&) {  // a benchmark's end: nothing more to do
    }
  }

  /// One map -> set access -> unmap, each call timed alone; cycle `i` of the run.
  cycle_times run(std::size_t i)
  {
    if (v_.reserve_each) { base_ = c_.reserve(bytes_); }
    auto* at = static_cast<char*>(base_) + (v_.fresh_addresses ? i % slots : 0) * each_;
    cycle_times t;
    auto t0 = clock_type::now();
    c_.map(at, each_, handle_);
    t.map = since_us(t0);
    if (v_.access) {
      t0 = clock_type::now();
      c_.set_access(at, each_, 0);
      for (int peer : peers_) { c_.set_access(at, each_, peer); }
      t.access = since_us(t0);
    }
    t0 = clock_type::now();
    c_.unmap(at, each_);
    t.unmap = since_us(t0);
    if (v_.reserve_each) { c_.unreserve(std::exchange(base_, nullptr), bytes_); }
    return t;
  }

  [[nodiscard]] std::size_t peer_count() const { return peers_.size(); }

 private:
  std::size_t reservation_bytes() const
  {
    auto const need = (slots + static_cast<std::size_t>(v_.neighbours)) * each_;
    if (!v_.huge_reservation) { return need; }
    auto const huge = rt().memory_info().total_bytes * 2;
    return std::max(need, (huge + each_ - 1) / each_ * each_);
  }
  void add_neighbour()
  {
    auto* at     = static_cast<char*>(base_) + (slots + neighbours_.size()) * each_;
    auto const h = c_.create(each_, v_.properties);
    c_.map(at, each_, h);
    c_.set_access(at, each_, 0);
    neighbours_.emplace_back(at, h);
  }
  static std::vector<int> peer_devices()
  {
    std::vector<int> out;
    for (int d = 1; d < rt().device_count(); ++d) {
      int can{};
      if (rt().device_can_access_peer(&can, d, 0) == cudaSuccess && can != 0) { out.push_back(d); }
    }
    return out;
  }

  vmm_calls& c_;
  variant const& v_;
  std::size_t each_;
  std::size_t bytes_;
  void* base_{};
  vmm_handle handle_{};
  std::vector<std::pair<void*, vmm_handle>> neighbours_;
  std::vector<int> peers_;
};

/// Holds the device state a variant asks for while it runs (on a GPU only).
class extra_holder {
 public:
  explicit extra_holder(extra_state s)
  {
    if (!on_gpu()) { return; }
    switch (s) {
      case extra_state::none:
        break;
      case extra_state::async_pool: {  // the pool stays (used once, trimmed)
        void* p{};
        if (cudaMallocAsync(&p, std::size_t{1} << 30, nullptr) == cudaSuccess) {
          (void)cudaFreeAsync(p, nullptr);
        }
        (void)cudaDeviceSynchronize();
        break;
      }
      case extra_state::mapped_host:
        if (cudaHostAlloc(&host_, 256 * MiB, cudaHostAllocMapped) != cudaSuccess) {
          host_ = nullptr;
        }
        break;
      case extra_state::big_allocation:
        if (cudaMalloc(&device_, std::size_t{8} << 30) != cudaSuccess) { device_ = nullptr; }
        break;
    }
    (void)cudaGetLastError();
  }
  extra_holder(extra_holder const&)            = delete;
  extra_holder& operator=(extra_holder const&) = delete;
  ~extra_holder()
  {
    if (host_ != nullptr) { (void)cudaFreeHost(host_); }
    if (device_ != nullptr) { (void)cudaFree(device_); }
  }

 private:
  void* host_{};
  void* device_{};
};

/// Runs all of a variant's cycles on a new thread that has made no CUDA call, and what that
/// thread's context was before its first call.
std::vector<cycle_times> cycles_on_fresh_thread(vmm_calls& c, variant const& v, std::string& ctx)
{
  std::vector<cycle_times> out;
  std::string error;
  std::thread worker{[&] {
    try {
      ctx = c.context_here();
      cycle_setup setup{c, v};
      for (int i = 0; i < v.iterations; ++i) {
        out.push_back(setup.run(static_cast<std::size_t>(i)));
      }
    } catch (std::exception const& e) {
      error = e.what();
    }
  }};
  worker.join();
  if (!error.empty()) { throw std::runtime_error{error}; }
  return out;
}

/// Microseconds to one decimal: the table's columns stay narrow.
double rounded(double us)
{
  return std::round(us * 10) / 10;
}

void report(benchmark::State& state, std::vector<cycle_times> times, std::string const& label)
{
  auto const n = static_cast<double>(std::max<std::size_t>(times.size(), 1));
  cycle_times sum;
  for (auto const& t : times) {
    sum.map += t.map;
    sum.access += t.access;
    sum.unmap += t.unmap;
  }
  state.counters["map_us"]    = rounded(sum.map / n);
  state.counters["access_us"] = rounded(sum.access / n);
  state.counters["unmap_us"]  = rounded(sum.unmap / n);
  if (!times.empty()) {
    auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
    std::nth_element(times.begin(), mid, times.end(),
                     [](auto const& a, auto const& b) { return a.total() < b.total(); });
    state.counters["cycle_p50_us"] = rounded(mid->total());
  }
  state.SetLabel(label);
}

/// The iterations of a variant run on the benchmark's thread, timed as it asks.
std::vector<cycle_times> cycles_here(benchmark::State& state, cycle_setup& setup, variant const& v)
{
  std::vector<cycle_times> out;
  out.reserve(static_cast<std::size_t>(v.iterations));
  for (auto _ : state) {
    if (v.sync_between) {
      state.PauseTiming();  // manual time ignores it; the other timings leave it out
      rt().device_synchronize();
      state.ResumeTiming();
    }
    if (v.how == timing::pause) {
      state.PauseTiming();
      state.ResumeTiming();
    }
    out.push_back(setup.run(out.size()));
    if (v.how == timing::manual) { state.SetIterationTime(out.back().total() * 1e-6); }
  }
  return out;
}

void run_variant(benchmark::State& state, variant const& v)
{
  if (!v.before_any_context) { (void)rt(); }  // this thread's context, whichever row runs first
  auto& c           = calls_for(v.driver);
  std::string label = c.name();
  if (v.before_any_context) { label += ", this thread: " + c.context_here(); }
  try {
    extra_holder extra{v.extra};
    std::vector<cycle_times> times;
    if (v.fresh_thread) {
      std::string ctx;
      times = cycles_on_fresh_thread(c, v, ctx);
      std::size_t i{};
      for (auto _ : state) { state.SetIterationTime(times.at(i++).total() * 1e-6); }
      label += ", new thread: " + ctx;
    } else {
      cycle_setup setup{c, v};
      times = cycles_here(state, setup, v);
      if (v.all_peers) { label += ", peers: " + std::to_string(setup.peer_count()); }
    }
    report(state, std::move(times), label);
  } catch (std::exception const& e) {
    state.SkipWithError(e.what());
  }
}

void add(std::string const& name, variant const& v)
{
  auto* b = benchmark::RegisterBenchmark(name.c_str(),
                                         [v](benchmark::State& state) { run_variant(state, v); });
  b->Iterations(v.iterations)->Unit(benchmark::kMicrosecond);
  if (v.how == timing::manual) { b->UseManualTime(); }
}

/// Each suspect changes one thing from cycle/16 (16 MiB, one address, the seam, manual time, the
/// benchmark's thread with a current context). The rows that change the process's device state
/// come last, since what they leave behind stays.
std::vector<std::pair<char const*, variant>> suspects()
{
  auto with = [](auto f) {
    variant v;
    f(v);
    return v;
  };
  return {
      {"no_context_thread/driver", with([](variant& v) { v.fresh_thread = v.driver = true; })},
      {"no_context_thread/seam", with([](variant& v) { v.fresh_thread = true; })},
      {"driver_direct", with([](variant& v) { v.driver = true; })},
      {"shareable", with([](variant& v) { v.properties.shareable = true; })},
      {"shareable_rdma", with([](variant& v) {
         v.properties.shareable       = true;
         v.properties.gpu_direct_rdma = true;
       })},
      {"fresh_addresses", with([](variant& v) { v.fresh_addresses = true; })},
      {"reserve_each_cycle", with([](variant& v) { v.reserve_each = true; })},
      {"huge_reservation", with([](variant& v) { v.huge_reservation = true; })},
      {"64_neighbours_mapped", with([](variant& v) { v.neighbours = 64; })},
      {"all_peers", with([](variant& v) { v.all_peers = true; })},
      {"no_access", with([](variant& v) { v.access = false; })},
      {"sync_between_cycles", with([](variant& v) { v.sync_between = true; })},
      {"timing_gb_loop", with([](variant& v) { v.how = timing::loop; })},
      {"timing_pause_resume", with([](variant& v) { v.how = timing::pause; })},
      {"2000_cycles", with([](variant& v) { v.iterations = 2000; })},
      {"mapped_host_held", with([](variant& v) { v.extra = extra_state::mapped_host; })},
      {"8GiB_cudaMalloc_held", with([](variant& v) { v.extra = extra_state::big_allocation; })},
      {"after_async_pool", with([](variant& v) { v.extra = extra_state::async_pool; })},
  };
}

/// 16 MiB, 30 cycles at fresh addresses of a 64-handle reservation, through the seam and the
/// driver alternately, twice: the pattern of a plain program that times the same calls.
void add_side_by_side_rows()
{
  for (int round = 0; round < 2; ++round) {
    for (bool driver : {false, true}) {
      variant v;
      v.iterations      = 30;
      v.fresh_addresses = true;
      v.driver          = driver;
      add("side_by_side/" + std::to_string(round) + (driver ? "/driver" : "/seam"), v);
    }
  }
}

// -- the single calls -----------------------------------------------------------------------

void create_release(benchmark::State& state)
{
  auto const bytes = static_cast<std::size_t>(state.range(0)) * MiB;
  for (auto _ : state) {
    auto const t0 = clock_type::now();
    rt().vmm_release(rt().vmm_create(bytes, 0, {}));
    state.SetIterationTime(since_us(t0) * 1e-6);
  }
  state.SetLabel(rt().name());
}

/// Access granted once over `count` handles of 16 MiB mapped side by side (the pool does one
/// set-access call per growth): time = map all + one access + unmap all.
void map_many_one_access(benchmark::State& state)
{
  auto const count           = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t each = 16 * MiB;
  auto& c                    = calls_for(false);
  void* base                 = c.reserve(count * each);
  std::vector<gpumem::vmm_handle> hs;
  for (std::size_t i = 0; i < count; ++i) { hs.push_back(c.create(each, {})); }
  for (auto _ : state) {
    auto const t0 = clock_type::now();
    for (std::size_t i = 0; i < count; ++i) {
      c.map(static_cast<char*>(base) + i * each, each, hs[i]);
    }
    c.set_access(base, count * each, 0);
    for (std::size_t i = 0; i < count; ++i) { c.unmap(static_cast<char*>(base) + i * each, each); }
    state.SetIterationTime(since_us(t0) * 1e-6);
  }
  for (auto h : hs) { c.release(h); }
  c.unreserve(base, count * each);
  state.SetLabel(rt().name());
}

/// 1 GiB (64 MiB on the host stand-in) of `mib`-MiB handles made ready by `threads` threads at
/// once, each creating and mapping its share of one reservation and granting access over it with
/// one call. Time: from the moment the threads are released to the last one's end (the threads are
/// started, and have a current context, before). The handles are unmapped and released untimed.
void growth_threads(benchmark::State& state)
{
  auto const each    = static_cast<std::size_t>(state.range(0)) * MiB;
  auto const threads = static_cast<std::size_t>(state.range(1));
  auto const total   = (on_gpu() ? std::size_t{1024} : std::size_t{64}) * MiB;
  auto const count   = total / each;
  auto& c            = calls_for(false);
  void* base         = c.reserve(total);
  std::vector<gpumem::vmm_handle> hs(count);
  auto at       = [&](std::size_t i) { return static_cast<char*>(base) + i * each; };
  double sum_us = 0;
  for (auto _ : state) {
    std::atomic<bool> go{false};
    std::atomic<std::size_t> ready{0};
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        if (on_gpu()) {  // a current context, made before the clock starts
          (void)cudaSetDevice(0);
          (void)cudaFree(nullptr);
        }
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) { std::this_thread::yield(); }
        auto const lo = count * t / threads, hi = count * (t + 1) / threads;
        for (auto i = lo; i < hi; ++i) {
          hs[i] = c.create(each, {});
          c.map(at(i), each, hs[i]);
        }
        if (hi > lo) { c.set_access(at(lo), (hi - lo) * each, 0); }
      });
    }
    while (ready.load() < threads) { std::this_thread::yield(); }
    auto const t0 = clock_type::now();
    go.store(true, std::memory_order_release);
    for (auto& th : pool) { th.join(); }
    auto const us = since_us(t0);
    state.SetIterationTime(us * 1e-6);
    sum_us += us;
    for (std::size_t i = 0; i < count; ++i) {
      c.unmap(at(i), each);
      c.release(hs[i]);
    }
  }
  c.unreserve(base, total);
  state.counters["us_per_handle"] =
      rounded(sum_us / static_cast<double>(state.iterations() * count));
  state.SetLabel(rt().name());
}

void idle_device_synchronize(benchmark::State& state)
{
  for (auto _ : state) { rt().device_synchronize(); }
  state.SetLabel(rt().name());
}

// First, before any row makes a context: the driver called as the benchmark used to call it.
int const registered_first = [] {
  variant v;
  v.before_any_context = v.driver = true;
  add("suspect/no_context_process/driver", v);
  return 0;
}();

BENCHMARK(create_release)
    ->Arg(2)
    ->Arg(16)
    ->Arg(64)
    ->Iterations(200)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(map_many_one_access)
    ->Arg(4)
    ->Arg(16)
    ->Iterations(100)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(idle_device_synchronize)->Iterations(10000)->Unit(benchmark::kMicrosecond);
BENCHMARK(growth_threads)
    ->ArgsProduct({{2, 16, 64}, {1, 2, 4, 8}})
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

int const registered = [] {
  for (std::size_t mib : {2, 16, 64}) {
    variant v;
    v.handle_mib = mib;
    add("cycle/" + std::to_string(mib), v);
  }
  add_side_by_side_rows();
  for (auto const& [name, v] : suspects()) { add(std::string{"suspect/"} + name, v); }
  return 0;
}();

}  // namespace
}  // namespace gpumem::bench
