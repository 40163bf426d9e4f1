// python/src/spec.cpp — resource specs (the gpumem tool's grammar, include/gpumem/spec/) from
// Python: one parser and one factory table, shared with the tool and the benchmarks.
#include "bindings.hpp"

#include <gpumem/detail/host_runtime.hpp>
#include <gpumem/spec/resource_factory.hpp>
#include <gpumem/spec/resource_spec.hpp>
#include <gpumem/mr/capabilities.hpp>

#include <mutex>
#include <unordered_map>

namespace gpumem::python {
namespace {

/// The stacks built from specs, by their top layer: trim() of a stack reaches every layer,
/// which Python cannot walk (it sees only the top).
std::mutex stacks_mutex;
std::unordered_map<mr::device_memory_resource const*, std::weak_ptr<spec::resource_stack>> stacks;

/// Builds `text`; the returned holder owns the whole stack and points at its top.
holder<mr::device_memory_resource> build_stack(std::string const& text, py::handle runtime)
{
  auto& rt             = to_runtime(runtime);
  auto const* host     = dynamic_cast<detail::host_runtime const*>(&rt);
  bool const simulated = host != nullptr && !host->options().backed;
  auto stack           = std::make_shared<spec::resource_stack>(spec::build(text, rt, simulated));
  auto* top            = &stack->top();
  {
    std::lock_guard lock{stacks_mutex};
    std::erase_if(stacks, [](auto const& entry) { return entry.second.expired(); });
    stacks[top] = stack;
  }
  return holder<mr::device_memory_resource>{std::move(stack), top};
}

/// Gives free memory back where the layer (or, for a stack built from a spec, any of its layers)
/// can; true when it could.
bool trim_layer(py::handle resource)
{
  auto& r = to_resource(resource);
  std::shared_ptr<spec::resource_stack> stack;
  {
    std::lock_guard lock{stacks_mutex};
    if (auto it = stacks.find(&r); it != stacks.end()) { stack = it->second.lock(); }
  }
  py::gil_scoped_release unlocked;
  if (stack) {
    stack->trim();
    return true;
  }
  if (auto* t = dynamic_cast<mr::trimmable*>(&r)) {
    t->trim();
    return true;
  }
  return false;
}

py::list factory_list()
{
  py::list out;
  for (auto const& e : spec::factory_table()) {
    py::dict params;
    for (auto const& p : e.params) {
      params[py::str(std::string{p.key})] =
          py::make_tuple(std::string{p.default_value}, std::string{p.help});
    }
    py::dict d;
    d["name"]      = std::string{e.name};
    d["kind"]      = std::string{spec::to_string(e.kind)};
    d["summary"]   = std::string{e.summary};
    d["params"]    = params;
    d["needs_gpu"] = e.needs_gpu;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_spec(py::module_& m)
{
  py::register_exception<spec::spec_error>(m, "SpecError", m.attr("LogicError"));
  m.attr("SpecError").attr("__doc__") =
      "A resource spec that cannot be parsed or built; the message points at the offending column "
      "and says what to write instead. Subclass of LogicError (ValueError).";
  m.def("_build_spec", &build_stack, py::arg("spec"), py::arg("runtime") = py::none(),
        py::keep_alive<0, 2>());
  m.def("_trim", &trim_layer, py::arg("resource"),
        "Gives the free memory of one layer (or of a whole stack built from a spec) back.");
  m.def(
      "canonical_spec",
      [](std::string const& text) { return spec::to_string(spec::parse_resource_spec(text)); },
      py::arg("spec"), "The canonical text of `spec` (raises SpecError when it does not parse).");
  m.def(
      "parse_size", [](std::string const& text) { return spec::parse_size(text); }, py::arg("text"),
      "Bytes in a size such as '4096', '256KiB', '1.5GiB', '80GB' or 'max'.");
  m.def("size_to_string", &spec::size_to_string, py::arg("nbytes"), "A size for people: '1GiB'.");
  m.def("list_resources", &factory_list,
        "Every resource a spec can name: name, kind, summary, params {key: (default, help)}, "
        "needs_gpu.");
  m.def("describe_resources", &spec::describe_factory,
        "The factory table as text (what `gpumem --list-resources` prints).");
}

}  // namespace gpumem::python
