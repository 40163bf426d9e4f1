// gpumem/spec/resource_factory.hpp — THE factory table: every resource the tool, the benchmarks and
// the Python package can build from a spec (resource_spec.hpp), listed once.
//
// build() turns a spec into a resource_stack over a given runtime: a simulated_device
// (`--simulate`) or the CUDA runtime. Entries marked needs_gpu (the CUDA peers, CUDA memory pools)
// cannot run over the host stand-in; build() says so.
// Errors: spec_error for unknown names (lists the valid ones), unknown parameters (lists the
// entry's parameters), bad values and misplaced leaves; what the resources' constructors throw
// passes through.
#pragma once

#include <gpumem/runtime.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/spec/resource_spec.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem::spec {

enum class resource_kind {
  leaf,          ///< takes memory from the runtime (bottom of a stack)
  suballocator,  ///< carves an upstream's memory (pool, arena, ...)
  adaptor,       ///< adds one concern over its upstream
  peer,          ///< another library's allocator, measured beside ours (needs a GPU)
};

[[nodiscard]] char const* to_string(resource_kind kind) noexcept;

struct param_info {
  std::string_view key;
  std::string default_value;  ///< as a value of the parameter reads it ("none", "16MiB", "12")
  std::string_view help;
};

/// What a maker may need besides its parameters and upstream.
struct build_context {
  gpumem::runtime* runtime{};
  bool simulated{};  ///< runtime is a simulated_device
};

class layer_args;

/// Reports the bytes a layer holds from below, for layers that bypass the runtime (CUDA pools,
/// peers). The replayer uses it instead of counting runtime allocations.
class footprint_source {
 public:
  virtual ~footprint_source()                          = default;
  [[nodiscard]] virtual std::size_t held_bytes() const = 0;
};

struct factory_entry {
  using make_fn = std::unique_ptr<mr::device_memory_resource> (*)(
      layer_args const& args, mr::device_memory_resource* upstream, build_context const& ctx);
  std::string_view name;
  resource_kind kind;
  std::string_view summary;
  std::vector<param_info> params;
  bool needs_gpu;
  make_fn make;
  /// The stack the tool's default run replays for this entry; empty: not in the default run.
  std::string_view default_run{};
};

/// A layer's parameters, typed; a key not given yields the entry's documented default.
class layer_args {
 public:
  layer_args(layer_spec const& layer, factory_entry const& entry);
  /// A size in [least, most]; throws spec_error naming the parameter, the value and the range.
  [[nodiscard]] std::size_t bytes(std::string_view key, std::size_t least = 0,
                                  std::size_t most = SIZE_MAX) const;
  [[nodiscard]] double number(std::string_view key) const;
  /// A whole number in [0, most]; throws spec_error naming the accepted range otherwise.
  [[nodiscard]] std::uint64_t count(std::string_view key, std::uint64_t most) const;
  /// bytes(key) rounded up to `alignment`; throws spec_error when that passes the largest size.
  [[nodiscard]] std::size_t aligned_bytes(std::string_view key, std::size_t alignment) const;
  [[nodiscard]] bool flag(std::string_view key) const;
  [[nodiscard]] std::string text(std::string_view key) const;
  /// True when the user gave `key` (not defaulted).
  [[nodiscard]] bool given(std::string_view key) const;

 private:
  [[nodiscard]] std::string_view raw(std::string_view key) const;
  layer_spec const* layer_;
  factory_entry const* entry_;
};

/// Owns the layers of a built stack; top() is the outermost. Destroys the top first (also when
/// assigned over), so no layer outlives its upstream.
class resource_stack {
 public:
  resource_stack() = default;
  resource_stack(resource_stack&&) noexcept;
  resource_stack& operator=(resource_stack&&) noexcept;
  ~resource_stack();

  [[nodiscard]] mr::device_memory_resource& top() const { return *layers_.back(); }
  /// The bottom layer: the leaf that takes memory from the runtime.
  [[nodiscard]] mr::device_memory_resource& leaf() const { return *layers_.front(); }
  /// Canonical spec text of what was built (defaults filled in for the leaf).
  [[nodiscard]] std::string const& spec() const noexcept { return spec_; }
  /// The layer implementing footprint_source, if any (nullptr: count runtime allocations).
  [[nodiscard]] footprint_source const* footprint() const noexcept;
  /// Counters of layers that keep them, worth printing beside timings ((name, value) pairs in a
  /// fixed order, e.g. the per-thread cache's {"cache_hits", 1234}); empty when no layer does.
  [[nodiscard]] std::vector<std::pair<std::string, double>> counters() const;
  [[nodiscard]] std::size_t size() const noexcept { return layers_.size(); }
  /// The bytes a request of `bytes` really takes in this stack: the block of the topmost layer
  /// that rounds requests to its own sizes (a binning bin, a fixed_size block, a caching bin),
  /// else `bytes` rounded up to 256 B. The difference to `bytes` is internal fragmentation.
  [[nodiscard]] std::size_t granted_bytes(std::size_t bytes) const noexcept;
  /// granted_bytes as a function that looks at the layers once, not at each call (the replay
  /// asks it for every block it lays out). Valid while the stack lives.
  [[nodiscard]] std::function<std::size_t(std::size_t)> grant_function() const;
  /// Flushes every logging layer; throws std::runtime_error when a log could not be written.
  void flush_logs();
  /// Gives free memory back to the device where a layer can: per-thread caches flush (top
  /// first, so their blocks reach the layers below), virtual-memory pools and CUDA memory pools
  /// trim to what is in use. Other layers (the pool, the arena, ...) keep what they hold. Not
  /// synchronous with other threads' allocations beyond what each layer guarantees.
  void trim();

 private:
  friend resource_stack build(resource_spec const&, gpumem::runtime&, bool);
  void clear() noexcept;  ///< destroys the layers from the top down
  std::vector<std::unique_ptr<mr::device_memory_resource>> layers_;  ///< [0] = bottom
  std::string spec_;
};

/// Every entry, in the order the tool lists them.
[[nodiscard]] std::span<factory_entry const> factory_table();
/// The entry named `name`; spec_error listing the valid names otherwise.
[[nodiscard]] factory_entry const& find_entry(std::string_view name);
/// A table of names, kinds, parameters and defaults for --help / --list-resources.
[[nodiscard]] std::string describe_factory();

/// Builds `spec` over `rt` (`simulated`: rt is a simulated_device without real memory).
[[nodiscard]] resource_stack build(resource_spec const& spec, gpumem::runtime& rt, bool simulated);
[[nodiscard]] resource_stack build(std::string_view spec, gpumem::runtime& rt, bool simulated);

}  // namespace gpumem::spec
