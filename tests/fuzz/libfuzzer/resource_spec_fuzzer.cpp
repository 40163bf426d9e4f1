// libFuzzer target: the resource-spec grammar and the factory's parameter checks on any text.
// Bad specs must end in spec_error; a spec that parses must print to text that parses back to the
// same spec; every known layer's parameters are read as the factory reads them.
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/spec/resource_spec.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size)
{
  using namespace gpumem::spec;
  std::string_view const text{reinterpret_cast<char const*>(data), size};
  resource_spec spec;
  try {
    spec = parse_resource_spec(text);
  } catch (spec_error const&) {
    return 0;
  }
  auto const printed = to_string(spec);
  if (to_string(parse_resource_spec(printed)) != printed) { std::abort(); }
  for (auto const& layer : spec.layers) {
    try {
      auto const& entry = find_entry(layer.name);
      layer_args const args{layer, entry};
      for (auto const& p : entry.params) {
        try {
          (void)args.bytes(p.key);
        } catch (spec_error const&) {
        }
        try {
          (void)args.count(p.key, 1000);
        } catch (spec_error const&) {
        }
      }
    } catch (spec_error const&) {
    }
  }
  return 0;
}
