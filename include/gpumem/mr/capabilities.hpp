// gpumem/mr/capabilities.hpp — small interfaces through which code that holds a resource of an
// unknown type (a stack built from a spec, the Python package, an adaptor over "any upstream")
// asks a layer what it can do, instead of casting it to every concrete type it knows.
//
// A resource implements the ones that describe it; a caller asks with
// `dynamic_cast<mr::trimmable*>(layer)` and gets nullptr where the layer cannot. None of these is
// on an allocation's path.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::mr {

/// Gives free memory that the resource holds back to what is below it (a pool's free memory, a
/// cache's blocks). Memory still handed out stays.
class trimmable {
 public:
  virtual void trim() = 0;

 protected:
  trimmable()                            = default;
  trimmable(trimmable const&)            = default;
  trimmable& operator=(trimmable const&) = default;
  ~trimmable()                           = default;
};

/// Holds a pool of memory taken from below: how many bytes (free and handed out).
class pool_size_source {
 public:
  [[nodiscard]] virtual std::size_t pool_size() const noexcept = 0;

 protected:
  pool_size_source()                                   = default;
  pool_size_source(pool_size_source const&)            = default;
  pool_size_source& operator=(pool_size_source const&) = default;
  ~pool_size_source()                                  = default;
};

/// Serves a request from a block of its own size classes: the block a request gets.
class block_rounding {
 public:
  /// The bytes of the block that serves `bytes`, or 0 when the request passes through.
  [[nodiscard]] virtual std::size_t block_for(std::size_t bytes) const = 0;

 protected:
  block_rounding()                                 = default;
  block_rounding(block_rounding const&)            = default;
  block_rounding& operator=(block_rounding const&) = default;
  ~block_rounding()                                = default;
};

/// A counter a layer reports (name, value), for tools and reports.
using named_counter = std::pair<std::string, double>;

/// Keeps counters worth reporting beside the footprint (hits, misses, flushes, ...).
class counter_source {
 public:
  /// Appends the layer's counters to `out`.
  virtual void append_counters(std::vector<named_counter>& out) const = 0;

 protected:
  counter_source()                                 = default;
  counter_source(counter_source const&)            = default;
  counter_source& operator=(counter_source const&) = default;
  ~counter_source()                                = default;
};

/// Buffers output (a log) that can be written out now. May throw what writing throws.
class flushable {
 public:
  virtual void flush() = 0;

 protected:
  flushable()                            = default;
  flushable(flushable const&)            = default;
  flushable& operator=(flushable const&) = default;
  ~flushable()                           = default;
};

}  // namespace gpumem::mr
