// gpumem/spec/resource_spec.hpp — the resource-spec grammar shared by the gpumem tool, the
// benchmarks and the Python package.
//
//   spec   := layer ( '>' layer )*          leftmost = outermost (what the caller allocates from),
//   layer  := name [ ':' param ( ',' param )* ]    each layer's upstream is the layer to its right
//   param  := key '=' value
//
// e.g. `pool:initial=1GiB,max=4GiB>cuda_async`, `statistics>binning>cuda`. A stack that does not
// end in a leaf resource gets `cuda` (device memory) appended by the factory. Names and keys are
// lower-case identifiers; spaces around tokens are ignored.
//
// Sizes (parse_size): an integer or decimal number with an optional unit, case-insensitive:
// B, KiB MiB GiB TiB (powers of 1024; K M G T mean the same), KB MB GB TB (powers of 1000), or
// `max` (the largest size). Examples: 4096, 256KiB, 1.5GiB, 80GB.
//
// Errors: spec_error (a logic_error) whose message shows the spec, points at the offending column
// and says what to write instead.
#pragma once

#include <gpumem/error.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::spec {

/// A spec that cannot be parsed or built; what() says what to write instead.
class spec_error : public logic_error {
 public:
  using logic_error::logic_error;
};

struct param {
  std::string key;
  std::string value;
};

struct layer_spec {
  std::string name;
  std::vector<param> params;
};

struct resource_spec {
  std::vector<layer_spec> layers;  ///< layers[0] is the outermost
};

/// Parses `text`; throws spec_error.
[[nodiscard]] resource_spec parse_resource_spec(std::string_view text);

/// The canonical text of a spec (`name:key=value,...>name`).
[[nodiscard]] std::string to_string(resource_spec const& spec);

/// Parses a size with an optional unit (see above); throws spec_error naming `what`.
[[nodiscard]] std::size_t parse_size(std::string_view text, std::string_view what = "size");

/// The largest amount of device memory a size parameter may name (64 PiB): far above any GPU,
/// and far enough below 2^64 that no sum or rounding of such sizes wraps.
inline constexpr std::size_t most_device_bytes = std::size_t{1} << 56;

/// parse_size, then checks that the size lies in [least, most] (`max` is the largest size, so it
/// passes only when most is); throws spec_error naming `what`, the value and the range otherwise.
/// Every size parameter of a spec and of the tool's options is read through this one check.
[[nodiscard]] std::size_t parse_size_in(std::string_view text, std::string_view what,
                                        std::size_t least, std::size_t most);

/// A size for people: "1GiB", "1.50GiB", "256B" — parse_size reads it back (exactly when whole).
[[nodiscard]] std::string size_to_string(std::size_t bytes);

}  // namespace gpumem::spec
