// The sampling profiler of `gpumem bench --profile` (see sampling_profile.hpp).
#include "sampling_profile.hpp"

#include <gpumem/detail/diagnostics/symbolizer.hpp>

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>

namespace gpumem::tool {
namespace {

constexpr std::size_t frames_kept = 8;  ///< return addresses kept beyond the interrupted one

struct sample {
  std::uintptr_t pc;
  std::array<std::uintptr_t, frames_kept> callers;  ///< 0 after the last one found
  std::uint32_t label;
};

constexpr std::size_t sample_capacity = std::size_t{1} << 20;  // 80 MiB
constexpr std::size_t label_capacity  = 4096;                  // measurements with samples kept
constexpr std::size_t samples_a_label = 20000;  // enough for a percentage; the rest are counted
constexpr long interval_us            = 100;

// Shared with the signal handler: written before the timer starts, read after it stops.
std::unique_ptr<sample[]> samples;
std::atomic<std::size_t> next_sample{0};
std::array<std::atomic<std::size_t>, label_capacity> label_samples{};  // taken, kept or not
std::atomic<std::uint32_t> current_label{0};                           // 0: no measurement
std::atomic<bool> active{false};

// The measured thread's stack, so that the frame walk never reads outside it.
thread_local constinit std::uintptr_t stack_lo = 0;
thread_local constinit std::uintptr_t stack_hi = 0;

/// Return addresses by the frame-pointer chain from `fp` (code built without frame pointers
/// ends it early; a pointer outside the stack, misaligned or not going up ends it).
void walk_frames(std::uintptr_t fp, std::array<std::uintptr_t, frames_kept>& out)
{
  out.fill(0);
  for (std::size_t i = 0; i < frames_kept; ++i) {
    if (fp < stack_lo || fp + 2 * sizeof(std::uintptr_t) > stack_hi || fp % sizeof(fp) != 0) {
      return;
    }
    auto const* frame = reinterpret_cast<std::uintptr_t const*>(fp);
    out[i]            = frame[1];
    if (frame[0] <= fp) { return; }
    fp = frame[0];
  }
}

void on_sigprof(int, siginfo_t*, void* context)
{
  if (!sampling_profile::measuring) { return; }
  auto const label = current_label.load(std::memory_order_relaxed);
  if (label == 0 || label >= label_capacity) { return; }
  if (label_samples[label].fetch_add(1, std::memory_order_relaxed) >= samples_a_label) { return; }
  auto const i = next_sample.fetch_add(1, std::memory_order_relaxed);
  if (i >= sample_capacity) { return; }
  auto const* uc = static_cast<ucontext_t const*>(context);
  auto& s        = samples[i];
#if defined(__x86_64__)
  s.pc = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  walk_frames(static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RBP]), s.callers);
#elif defined(__aarch64__)
  s.pc = static_cast<std::uintptr_t>(uc->uc_mcontext.pc);
  walk_frames(static_cast<std::uintptr_t>(uc->uc_mcontext.regs[29]), s.callers);
#else
  s.pc = 0;
  s.callers.fill(0);
  (void)uc;
#endif
  s.label = label;
}

std::string demangled(char const* name)
{
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> d{
      abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free};
  return status == 0 && d ? std::string{d.get()} : std::string{name};
}

/// `name` without template arguments and parameters: "a::b<…>::f".
std::string short_name(std::string const& name)
{
  std::string out;
  int depth = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char const ch = name[i];
    if (depth == 0 && ch == '(') {
      if (name.compare(i, 21, "(anonymous namespace)") != 0) { break; }
      out += "(anonymous namespace)";
      i += 20;
    } else if (ch == '<') {
      if (depth++ == 0) { out += "<…>"; }
    } else if (ch == '>' && depth > 0) {
      --depth;
    } else if (depth == 0) {
      out += ch;
    }
  }
  return out.empty() ? name : out;
}

/// The main program's load bias and the address ranges of its loaded segments.
struct main_program {
  std::uintptr_t bias{};
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  [[nodiscard]] bool contains(std::uintptr_t pc) const
  {
    return std::any_of(ranges.begin(), ranges.end(),
                       [pc](auto const& r) { return pc >= r.first && pc < r.second; });
  }
};

main_program find_main_program()
{
  main_program m;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        auto& mp = *static_cast<main_program*>(out);
        mp.bias  = info->dlpi_addr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          auto const& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD) {
            mp.ranges.emplace_back(info->dlpi_addr + ph.p_vaddr,
                                   info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
          }
        }
        return 1;  // the first object is the main program
      },
      &m);
  return m;
}

/// Function names and, for gpumem's own code, source lines ("file:line") of addresses.
struct address_names {
  std::unordered_map<std::uintptr_t, std::string> name;
  std::unordered_map<std::uintptr_t, std::string> line;
};

/// A shared library's address: its exported function and the library ("f [libc.so.6]").
std::string library_name(std::uintptr_t pc)
{
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(pc), &info) == 0 || info.dli_fname == nullptr) {
    return "[unknown]";
  }
  auto const file = "[" + std::filesystem::path{info.dli_fname}.filename().string() + "]";
  return info.dli_sname != nullptr ? short_name(demangled(info.dli_sname)) + " " + file : file;
}

/// The main program's address from its debug information (detail::symbolize: addr2line, run
/// without a shell, when installed): "inner (in outer)" when `inner` was inlined into `outer`,
/// and the innermost source line; else "gpumem+0x…".
void name_in_main(detail::code_location const& loc, std::uintptr_t bias, address_names& out)
{
  auto const& chain = loc.source;
  if (chain.empty() || chain.front().function.empty()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "gpumem+0x%zx", static_cast<std::size_t>(loc.address - bias));
    out.name[loc.address] = buf;
    return;
  }
  auto const inner      = short_name(chain.front().function);
  auto const outer      = short_name(chain.back().function);
  out.name[loc.address] = inner == outer ? inner : inner + " (in " + outer + ")";
  if (!chain.front().file.empty()) {
    out.line[loc.address] = std::filesystem::path{chain.front().file}.filename().string() + ":" +
                            std::to_string(chain.front().line);
  }
}

/// A function name for every distinct address.
address_names name_addresses(std::vector<std::uintptr_t> const& pcs)
{
  auto const mp = find_main_program();
  address_names all;
  std::vector<std::uintptr_t> in_main;
  for (auto pc : pcs) {
    if (mp.contains(pc)) {
      in_main.push_back(pc);
    } else {
      all.name[pc] = library_name(pc);
    }
  }
  for (auto const& loc : detail::symbolize(in_main)) { name_in_main(loc, mp.bias, all); }
  return all;
}

}  // namespace

sampling_profile::measured_scope::measured_scope() noexcept
{
  measuring = true;
  if (!active.load()) { return; }
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* base       = nullptr;
    std::size_t size = 0;
    if (pthread_attr_getstack(&attr, &base, &size) == 0) {
      stack_lo = reinterpret_cast<std::uintptr_t>(base);
      stack_hi = stack_lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  sigevent ev{};
  ev.sigev_notify          = SIGEV_THREAD_ID;
  ev.sigev_signo           = SIGPROF;
  ev._sigev_un._tid        = static_cast<int>(gettid());
  constexpr long period_ns = interval_us * 1000;
  itimerspec const every{{0, period_ns}, {0, period_ns}};
  if (timer_create(CLOCK_MONOTONIC, &ev, &timer_) == 0) {
    armed_ = true;
    timer_settime(timer_, 0, &every, nullptr);
  }
}

sampling_profile::measured_scope::~measured_scope()
{
  if (armed_) { timer_delete(timer_); }
  measuring = false;
}

sampling_profile::sampling_profile()
{
  if (active.exchange(true)) { throw std::runtime_error{"a profile is already running"}; }
  samples = std::make_unique<sample[]>(sample_capacity);
  next_sample.store(0);
  for (auto& n : label_samples) { n.store(0); }
  struct sigaction sa {};
  sa.sa_sigaction = &on_sigprof;
  sa.sa_flags     = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGPROF, &sa, nullptr) != 0) {
    active.store(false);
    throw std::runtime_error{"--profile: could not install the SIGPROF handler"};
  }
  labels_.emplace_back();  // label 0: no measurement
}

sampling_profile::~sampling_profile()
{
  stop();
  active.store(false);
}

void sampling_profile::stop() noexcept
{
  if (stopped_) { return; }
  stopped_ = true;
  current_label.store(0);
  signal(SIGPROF, SIG_IGN);  // a signal already on its way finds no handler to run
}

void sampling_profile::begin(std::string const& label)
{
  labels_.push_back(label);
  current_label.store(static_cast<std::uint32_t>(labels_.size() - 1));
}

void sampling_profile::end() noexcept
{
  current_label.store(0);
}

void sampling_profile::write(std::ostream& out, double min_percent, std::size_t top)
{
  stop();
  auto const n = std::min(next_sample.load(), sample_capacity);
  std::vector<std::uintptr_t> pcs;
  for (std::size_t i = 0; i < n; ++i) {
    pcs.push_back(samples[i].pc);
    for (auto r : samples[i].callers) {
      if (r != 0) { pcs.push_back(r - 1); }  // the call instruction, not the one after it
    }
  }
  std::sort(pcs.begin(), pcs.end());
  pcs.erase(std::unique(pcs.begin(), pcs.end()), pcs.end());
  auto const named  = name_addresses(pcs);
  auto const& names = named.name;
  auto const mp     = find_main_program();
  // Two views: the function the thread was in, and the innermost of gpumem's own functions on
  // its stack (where a wait in the C library or the driver came from).
  std::vector<std::map<std::string, std::size_t>> self(labels_.size()), ours(labels_.size());
  std::vector<std::size_t> totals(labels_.size());
  for (std::size_t i = 0; i < n; ++i) {
    auto const& s = samples[i];
    ++self[s.label][names.at(s.pc)];
    std::string where = "(no gpumem frame found)";
    if (mp.contains(s.pc)) {
      where = names.at(s.pc);
    } else {
      for (auto r : s.callers) {
        if (r != 0 && mp.contains(r - 1)) {  // a call out of gpumem: name the call's line
          auto const l = named.line.find(r - 1);
          where        = names.at(r - 1) + (l != named.line.end() ? " at " + l->second : "");
          break;
        }
      }
    }
    ++ours[s.label][where];
    ++totals[s.label];
  }
  out << "profile: where the measured threads were, sampled every " << interval_us
      << " us of each one's wall-clock time (at most " << samples_a_label
      << " samples a measurement), by function.\n"
      << "'self': the function running; 'from gpumem': the innermost gpumem function on the stack\n"
      << "(found by frame pointers: build with -fno-omit-frame-pointer for calls into "
         "libraries).\n";
  auto print = [&](std::map<std::string, std::size_t> const& counts, std::size_t total) {
    std::vector<std::pair<std::size_t, std::string>> rows;
    for (auto const& [fn, count] : counts) { rows.emplace_back(count, fn); }
    std::sort(rows.rbegin(), rows.rend());
    for (std::size_t i = 0; i < rows.size() && i < top; ++i) {
      double const pct = 100.0 * static_cast<double>(rows[i].first) / static_cast<double>(total);
      if (pct < min_percent) { break; }
      char buf[32];
      std::snprintf(buf, sizeof buf, "  %6.1f%%  ", pct);
      auto fn = rows[i].second;
      if (fn.size() > 160) { fn = fn.substr(0, 157) + "..."; }
      out << buf << fn << "\n";
    }
  };
  for (std::size_t l = 1; l < labels_.size(); ++l) {
    auto const taken = l < label_capacity ? label_samples[l].load() : 0;
    out << "\n" << labels_[l] << ": " << totals[l] << " samples";
    if (taken > totals[l]) { out << " (of " << taken << ")"; }
    out << "\n";
    if (totals[l] == 0) { continue; }
    out << " self:\n";
    print(self[l], totals[l]);
    out << " from gpumem:\n";
    print(ours[l], totals[l]);
  }
}

}  // namespace gpumem::tool
