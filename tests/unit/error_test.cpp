// Errors: the exception hierarchy, the GPUMEM_ macros and their messages.
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/resource_ref.hpp>

#include <gtest/gtest.h>

namespace gpumem {
namespace {

TEST(errors, hierarchy_lets_callers_catch_standard_types)
{
  EXPECT_THROW(throw out_of_memory{"x"}, bad_alloc);
  EXPECT_THROW(throw out_of_memory{"x"}, std::bad_alloc);
  EXPECT_THROW(throw logic_error{"x"}, std::logic_error);
  EXPECT_THROW(throw cuda_error(cudaErrorInvalidValue, "x"), std::runtime_error);
  EXPECT_STREQ(bad_alloc{"what it was"}.what(), "what it was");
}

TEST(errors, expects_throws_the_given_type_with_the_message_and_no_source_location)
{
  try {
    GPUMEM_EXPECTS(1 + 1 == 3, logic_error, detail::format("value was ", 42));
    FAIL() << "no throw";
  } catch (logic_error const& e) {
    std::string const what = e.what();
    EXPECT_EQ(what.find("error_test.cpp"), std::string::npos) << what;
    EXPECT_NE(what.find("value was 42"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(GPUMEM_EXPECTS(true, logic_error, "never"));
  EXPECT_THROW(GPUMEM_FAIL(bad_alloc, "always"), bad_alloc);
}

TEST(errors, messages_name_sources_without_the_build_folder)
{
  EXPECT_EQ(detail::source_name("/home/ci/gpumem/include/gpumem/mr/pool_memory_resource.hpp"),
            "gpumem/mr/pool_memory_resource.hpp");
  EXPECT_EQ(detail::source_name("/build/x/src/mr/caching_memory_resource.cpp"),
            "src/mr/caching_memory_resource.cpp");
  EXPECT_EQ(detail::source_name("/opt/tools/gpumem/main.cpp"), "main.cpp");
  EXPECT_EQ(detail::source_name("error_test.cpp"), "error_test.cpp");
  EXPECT_EQ(detail::site_message(__FILE__, 7, "m"), "gpumem failure at error_test.cpp:7: m");
}

// Messages for users say what was wrong with the values, not where in gpumem's sources.
TEST(errors, user_facing_messages_carry_no_source_location)
{
  try {
    GPUMEM_EXPECTS(1 + 1 == 3, logic_error, "alignment must be a power of two, got 3");
    FAIL() << "no throw";
  } catch (logic_error const& e) {
    EXPECT_STREQ(e.what(), "gpumem: alignment must be a power of two, got 3");
  }
  try {
    GPUMEM_CUDA_TRY(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (cuda_error const& e) {
    EXPECT_EQ(std::string{e.what()}.find("error_test.cpp"), std::string::npos) << e.what();
    EXPECT_EQ(std::string{e.what()}.find("failure at"), std::string::npos) << e.what();
  }
}

TEST(errors, cuda_try_maps_allocation_failure_to_out_of_memory_and_keeps_status)
{
  EXPECT_THROW(GPUMEM_CUDA_TRY(cudaErrorMemoryAllocation), out_of_memory);
  try {
    GPUMEM_CUDA_TRY(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.status(), cudaErrorInvalidValue);
    EXPECT_NE(std::string{e.what()}.find("cudaErrorInvalidValue"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(GPUMEM_CUDA_TRY(cudaSuccess));
  GPUMEM_CUDA_TRY_NOEXCEPT(cudaErrorInvalidValue);  // swallowed
}

TEST(errors, null_resource_pointer_is_a_logic_error)
{
  mr::cuda_memory_resource* null_mr = nullptr;
  EXPECT_THROW((void)to_device_async_resource_ref_checked(null_mr), logic_error);
  mr::cuda_memory_resource real;
  EXPECT_NO_THROW((void)to_device_async_resource_ref_checked(&real));
}

TEST(format, bytes_are_written_for_people_with_the_exact_value)
{
  EXPECT_EQ(detail::bytes_str(100), "100 B");
  EXPECT_EQ(detail::bytes_str(1536), "1.50 KiB (1536 B)");
  EXPECT_EQ(detail::bytes_str(std::size_t{3} << 30), "3.00 GiB (3221225472 B)");
}

}  // namespace
}  // namespace gpumem
