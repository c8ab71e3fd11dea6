// The registry's table of backend facts, "auto", and what make_engine refuses from the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "io_test_util.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

using testing::expect_error;

bool listed(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

TEST(Backends, TheTableHoldsEveryBackendWithItsFacts) {
  std::vector<std::string> names;
  for (const BackendFacts& b : all_backends()) names.push_back(b.name);
  EXPECT_EQ(names, (std::vector<std::string>{"reference", "unfused", "fused", "fused-fp8"}));
  EXPECT_EQ(backend_facts("reference").precision, Precision::fp32);
  EXPECT_EQ(backend_facts("fused").precision, Precision::bf16);
  EXPECT_EQ(backend_facts("fused-fp8").precision, Precision::fp8);
  EXPECT_STREQ(precision_name(backend_facts("fused-fp8").precision), "fp8");
  EXPECT_FALSE(backend_facts("reference").needs_cuda);
  EXPECT_TRUE(backend_facts("fused").needs_cuda);
  // Each fp8 backend names a bf16 twin of the same table; no other backend has one.
  for (const BackendFacts& b : all_backends()) {
    EXPECT_EQ(b.bf16_twin != nullptr, b.precision == Precision::fp8) << b.name;
    if (b.bf16_twin) {
      EXPECT_EQ(backend_facts(b.bf16_twin).precision, Precision::bf16) << b.name;
    }
  }
  EXPECT_TRUE(backend_facts("fused").takes_tuning);
  EXPECT_FALSE(backend_facts("fused-fp8").takes_tuning);
  EXPECT_TRUE(backend_facts("fused-fp8").takes_kernel_choices);
  EXPECT_FALSE(backend_facts("unfused").takes_kernel_choices);
  // A factory exactly where this build compiled the backend.
  for (const BackendFacts& b : all_backends())
    EXPECT_EQ(b.factory != nullptr, listed(backend_names(), b.name)) << b.name;
}

TEST(Backends, UnknownNamesAreRefusedNamingTheKnownOnes) {
  expect_error([] { backend_facts("fusd"); }, {"unknown backend 'fusd'", "reference", "auto"});
  const Weights w = Weights::random(Config::preset("tiny"), 3);
  expect_error([&] { make_engine("nope", w); }, {"unknown backend 'nope'"});
}

TEST(Backends, AutoPicksFusedOnHopperOnlyAndSaysWhy) {
  GpuInfo none;
  none.why_absent = "no NVIDIA GPU was found";
  ResolvedBackend r = resolve_backend(kAutoBackend, none);
  EXPECT_EQ(r.name, "reference");
  EXPECT_NE(r.why.find("backend auto: reference"), std::string::npos) << r.why;

  GpuInfo ampere;
  ampere.present = true;
  ampere.name = "A100";
  ampere.cc_major = 8;
  r = resolve_backend(kAutoBackend, ampere);
  EXPECT_EQ(r.name, "reference");

  GpuInfo hopper = ampere;
  hopper.name = "H100";
  hopper.cc_major = 9;
  r = resolve_backend(kAutoBackend, hopper);
  EXPECT_EQ(r.name, listed(backend_names(), "fused") ? "fused" : "reference") << r.why;
  EXPECT_FALSE(r.why.empty());
  r = resolve_backend(kAutoBackend, hopper, /*fp8_model=*/true);  // fused refuses fp8 models
  EXPECT_EQ(r.name, listed(backend_names(), "fused-fp8") ? "fused-fp8" : "reference") << r.why;
  EXPECT_EQ(resolve_backend(kAutoBackend, none, true).name, "reference");  // it runs fp8 models too

  r = resolve_backend("unfused", none);  // a named backend is itself, whatever the machine
  EXPECT_EQ(r.name, "unfused");
  EXPECT_TRUE(r.why.empty());
}

TEST(Backends, RunnableNeedsHopperForGpuBackends) {
  GpuInfo none;
  EXPECT_EQ(runnable_backends(none), std::vector<std::string>{"reference"});
  GpuInfo hopper;
  hopper.present = true;
  hopper.cc_major = 9;
  EXPECT_EQ(runnable_backends(hopper), backend_names());
}

TEST(Backends, ChoicesABackendDoesNotTakeAreRefused) {
  const Weights w = Weights::random(Config::preset("tiny"), 3);
  EngineOptions o;
  o.fused.pinned.row_groups = 2;
  expect_error([&] { make_engine("reference", w, o); }, {"kernel choices", "not 'reference'"});
  EngineOptions t;
  t.fused.tuned.push_back({1, {}});
  expect_error([&] { make_engine("reference", w, t); }, {"not 'reference'"});
}

}  // namespace
}  // namespace swapffn
