// The factory machinery: typed parameters, lookup with diagnoses, building a stack.
#include <gpumem/detail/format.hpp>
#include <gpumem/align.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/caching_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/thread_cache_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/spec/resource_factory.hpp>

#include "shown.hpp"

#include <cstdlib>

namespace gpumem::spec {
namespace {

std::string valid_names()
{
  std::string out;
  for (auto kind : {resource_kind::suballocator, resource_kind::leaf, resource_kind::adaptor,
                    resource_kind::peer}) {
    out += detail::format("\n  ", to_string(kind), "s:");
    for (auto const& e : factory_table()) {
      if (e.kind == kind) { out += detail::format(" ", e.name); }
    }
  }
  return out;
}

std::string param_list(factory_entry const& entry)
{
  if (entry.params.empty()) { return detail::format(entry.name, " takes no parameters"); }
  std::string out = detail::format("parameters of ", entry.name, ":");
  for (auto const& p : entry.params) {
    out += detail::format("\n  ", p.key, " (default ", p.default_value, "): ", p.help);
  }
  return out;
}

void check_keys(layer_spec const& layer, factory_entry const& entry)
{
  for (auto const& given : layer.params) {
    bool known = false;
    for (auto const& p : entry.params) { known = known || p.key == given.key; }
    if (!known) {
      throw spec_error{detail::format("resource '", entry.name, "' has no parameter '", given.key,
                                      "'; ", param_list(entry))};
    }
  }
}

void check_placement(resource_spec const& spec, bool simulated)
{
  for (std::size_t i = 0; i < spec.layers.size(); ++i) {
    auto const& entry = find_entry(spec.layers[i].name);
    check_keys(spec.layers[i], entry);
    bool const bottom_kind = entry.kind == resource_kind::leaf || entry.kind == resource_kind::peer;
    if (bottom_kind && i + 1 != spec.layers.size()) {
      throw spec_error{detail::format("'", entry.name, "' is a ", to_string(entry.kind),
                                      " and takes no upstream: put it last, as in pool>",
                                      entry.name)};
    }
    if (entry.needs_gpu && simulated) {
      throw spec_error{detail::format("'", entry.name,
                                      "' needs a GPU and cannot run on the simulated address "
                                      "space: drop --simulate on a GPU machine, or pick another "
                                      "resource")};
    }
  }
}

}  // namespace

char const* to_string(resource_kind kind) noexcept
{
  switch (kind) {
    case resource_kind::leaf:
      return "leaf";
    case resource_kind::suballocator:
      return "suballocator";
    case resource_kind::adaptor:
      return "adaptor";
    case resource_kind::peer:
      return "peer";
  }
  return "?";
}

layer_args::layer_args(layer_spec const& layer, factory_entry const& entry)
    : layer_{&layer}, entry_{&entry}
{
}

std::string_view layer_args::raw(std::string_view key) const
{
  for (auto const& p : layer_->params) {
    if (p.key == key) { return p.value; }
  }
  for (auto const& p : entry_->params) {
    if (p.key == key) { return p.default_value; }
  }
  throw logic_error{
      detail::format("factory entry ", entry_->name, " reads undeclared parameter ", key)};
}

bool layer_args::given(std::string_view key) const
{
  for (auto const& p : layer_->params) {
    if (p.key == key) { return true; }
  }
  return false;
}

std::size_t layer_args::bytes(std::string_view key, std::size_t least, std::size_t most) const
{
  return parse_size_in(raw(key), detail::format(entry_->name, " parameter ", key), least, most);
}

double layer_args::number(std::string_view key) const
{
  std::string const s{raw(key)};
  char* end      = nullptr;
  double const v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) {
    throw spec_error{detail::format(entry_->name, " parameter ", key, ": '", detail_shown::shown(s),
                                    "' is not a number; ", param_list(*entry_))};
  }
  return v;
}

std::uint64_t layer_args::count(std::string_view key, std::uint64_t most) const
{
  std::string const s{raw(key)};
  std::uint64_t v = 0;
  bool ok         = !s.empty();
  for (char c : s) {
    ok = ok && c >= '0' && c <= '9' && !__builtin_mul_overflow(v, 10U, &v) &&
         !__builtin_add_overflow(v, static_cast<std::uint64_t>(c - '0'), &v);
  }
  if (!ok || v > most) {
    throw spec_error{detail::format(entry_->name, " parameter ", key, ": '", detail_shown::shown(s),
                                    "' is not a whole number from 0 to ", most)};
  }
  return v;
}

std::size_t layer_args::aligned_bytes(std::string_view key, std::size_t alignment) const
{
  auto const v = bytes(key, 0, most_device_bytes);
  if (!can_align_up(v, alignment)) {
    throw spec_error{detail::format(entry_->name, " parameter ", key, ": '",
                                    detail_shown::shown(raw(key)),
                                    "' cannot be rounded up to a multiple of ", alignment,
                                    " bytes; give at most ", v & ~(alignment - 1))};
  }
  return align_up(v, alignment);
}

bool layer_args::flag(std::string_view key) const
{
  auto const s = raw(key);
  if (s == "true" || s == "1" || s == "yes" || s == "on") { return true; }
  if (s == "false" || s == "0" || s == "no" || s == "off") { return false; }
  throw spec_error{detail::format(entry_->name, " parameter ", key, ": '", detail_shown::shown(s),
                                  "' is not a boolean; write true or false")};
}

std::string layer_args::text(std::string_view key) const
{
  return std::string{raw(key)};
}

resource_stack::resource_stack(resource_stack&&) noexcept = default;
// Layers go from the top down, so none outlives the layer below it (a defaulted assignment
// would let the vector destroy the old layers bottom first).
resource_stack& resource_stack::operator=(resource_stack&& other) noexcept
{
  if (this != &other) {
    clear();
    layers_ = std::move(other.layers_);
    spec_   = std::move(other.spec_);
  }
  return *this;
}

resource_stack::~resource_stack()
{
  clear();
}

void resource_stack::clear() noexcept
{
  while (!layers_.empty()) { layers_.pop_back(); }
}

void resource_stack::flush_logs()
{
  for (auto const& layer : layers_) {
    if (auto* log = dynamic_cast<mr::flushable*>(layer.get())) { log->flush(); }
  }
}

void resource_stack::trim()
{
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    if (auto* t = dynamic_cast<mr::trimmable*>(it->get())) { t->trim(); }
  }
}

footprint_source const* resource_stack::footprint() const noexcept
{
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    if (auto const* f = dynamic_cast<footprint_source const*>(it->get())) { return f; }
  }
  return nullptr;
}

namespace {

/// The layers that round requests to their own block sizes, outermost first.
std::vector<mr::block_rounding const*> rounding_layers(
    std::vector<std::unique_ptr<mr::device_memory_resource>> const& layers)
{
  std::vector<mr::block_rounding const*> out;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (auto const* r = dynamic_cast<mr::block_rounding const*>(it->get())) { out.push_back(r); }
  }
  return out;
}

/// The block the outermost rounding layer that serves `bytes` gives it.
std::size_t grant_of(std::vector<mr::block_rounding const*> const& layers, std::size_t bytes)
{
  for (auto const* r : layers) {
    if (auto const n = r->block_for(bytes); n != 0) { return n; }
  }
  return align_up(bytes, CUDA_ALLOCATION_ALIGNMENT);
}

}  // namespace

std::size_t resource_stack::granted_bytes(std::size_t bytes) const noexcept
{
  return grant_of(rounding_layers(layers_), bytes);
}

std::function<std::size_t(std::size_t)> resource_stack::grant_function() const
{
  return [layers = rounding_layers(layers_)](std::size_t bytes) { return grant_of(layers, bytes); };
}

std::vector<std::pair<std::string, double>> resource_stack::counters() const
{
  std::vector<mr::named_counter> out;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    if (auto const* c = dynamic_cast<mr::counter_source const*>(it->get())) {
      c->append_counters(out);
    }
  }
  return out;
}

factory_entry const& find_entry(std::string_view name)
{
  for (auto const& e : factory_table()) {
    if (e.name == name) { return e; }
  }
  throw spec_error{detail::format("unknown resource '", detail_shown::shown(name),
                                  "'; the valid names are:", valid_names(),
                                  "\n(`gpumem replay --list-resources` describes them)")};
}

std::string describe_factory()
{
  std::string out;
  for (auto const& e : factory_table()) {
    out += detail::format(e.name, " (", to_string(e.kind), e.needs_gpu ? ", needs a GPU" : "",
                          "): ", e.summary, "\n");
    for (auto const& p : e.params) {
      out += detail::format("    ", p.key, "=", p.default_value, "  ", p.help, "\n");
    }
  }
  return out;
}

resource_stack build(resource_spec const& spec, gpumem::runtime& rt, bool simulated)
{
  resource_spec full = spec;
  if (full.layers.empty()) { throw spec_error{"empty resource spec"}; }
  auto const bottom = find_entry(full.layers.back().name).kind;
  if (bottom != resource_kind::leaf && bottom != resource_kind::peer) {
    full.layers.push_back({"cuda", {}});
  }
  if (full.layers.size() > max_stack_depth) {
    throw spec_error{detail::format("a resource stack may hold at most ", max_stack_depth,
                                    " resources; '", to_string(spec), "' needs ",
                                    full.layers.size(), " (with the cuda leaf below)")};
  }
  check_placement(full, simulated);
  resource_stack stack;
  build_context const ctx{&rt, simulated};
  for (auto it = full.layers.rbegin(); it != full.layers.rend(); ++it) {
    auto const& entry = find_entry(it->name);
    auto* upstream    = stack.layers_.empty() ? nullptr : stack.layers_.back().get();
    stack.layers_.push_back(entry.make(layer_args{*it, entry}, upstream, ctx));
  }
  stack.spec_ = to_string(full);
  return stack;
}

resource_stack build(std::string_view spec, gpumem::runtime& rt, bool simulated)
{
  return build(parse_resource_spec(spec), rt, simulated);
}

}  // namespace gpumem::spec
