// tests/conformance/conformance.hpp — the one typed suite every device resource passes.
//
// A configuration is config<BackendTag, Maker>. A Maker is
//   struct x_maker {
//     static constexpr char const* name = "x";
//     static constexpr bool thread_safe = true;   // runs the many-thread test
//     static constexpr bool system_backed = true; // optional: system or managed memory that
//                                                 // may exceed device memory; skips total+1
//     static std::shared_ptr<mr::device_memory_resource> make(test::backend&);  // may throw
//   };                                                              // test::unsupported
// The suite is instantiated once, in conformance_test.cpp, over the one type list.
#pragma once

#include <support/backend.hpp>
#include <support/resource_stack.hpp>

#include <gpumem/mr/device_memory_resource.hpp>

#include <gtest/gtest.h>

#include <map>
#include <memory>

namespace gpumem::test {

template <class BackendTag, class Maker>
struct config {
  using backend_tag = BackendTag;
  using maker       = Maker;
};

struct config_names {
  template <class C>
  static std::string GetName(int)
  {
    return std::string{C::backend_tag::name} + "_" + C::maker::name;
  }
};

/// Live allocations of a test, checked for overlap and (host-accessible memory) for corruption.
class live_set {
 public:
  explicit live_set(bool host_accessible) : host_accessible_{host_accessible} {}
  void add(void* p, std::size_t bytes, unsigned char tag);
  /// Removes and returns the size; verifies the fill pattern first.
  std::size_t remove(void* p);
  [[nodiscard]] bool empty() const { return live_.empty(); }
  [[nodiscard]] std::size_t size() const { return live_.size(); }
  [[nodiscard]] std::map<char*, std::pair<std::size_t, unsigned char>> const& all() const
  {
    return live_;
  }

 private:
  bool host_accessible_;
  std::map<char*, std::pair<std::size_t, unsigned char>> live_;
};

template <class Config>
class conformance : public ::testing::Test {
 protected:
  void SetUp() override
  {
    backend_ = Config::backend_tag::make();
    if (!backend_) { GTEST_SKIP() << "GPU test skipped: " << describe_no_gpu(); }
    try {
      mr_ = Config::maker::make(*backend_);
    } catch (unsupported const& e) {
      GTEST_SKIP() << Config::maker::name << " unsupported here: " << e.what();
    }
  }
  void TearDown() override
  {
    if (backend_) { backend_->synchronize(); }
    mr_.reset();
  }
  static std::string describe_no_gpu()
  {
    auto why = why_no_gpu();
    return why.empty() ? "test kernels not built" : why;
  }

  mr::device_memory_resource& mr() { return *mr_; }
  backend& be() { return *backend_; }

  std::unique_ptr<backend> backend_;
  std::shared_ptr<mr::device_memory_resource> mr_;
};

TYPED_TEST_SUITE_P(conformance);

}  // namespace gpumem::test
