// The fused backend's kernel configuration (src/cuda/fused/fused_config.cpp): the defaults by rows
// per SM on this GPU, pinned and tuned choices over them, the fallback head, and the refusals: a
// head that would change with the batch size (batch invariance), and choices the kernels cannot run.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda/fused/fused_config.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {
namespace {

FusedOptions pinned(const std::string& spec) {
  FusedOptions o;
  o.pinned = parse_fused_choice(spec);
  return o;
}

TEST(FusedConfig, DefaultsFollowTheRowsPerSm) {
  const Config cfg = Config::preset("default");
  const int64_t sms = query_gpu().sm_count;
  for (const int64_t b : {1, 2, 4, 8, 16, 32, 64}) {
    const FusedKernelConfig k = select_fused_config(cfg, b, {});
    const int64_t rows = b * 512, up_tiles = rows / 128 * 32;  // 2F = 8192: 32 tiles of 256
    const DualGemmTile want = up_tiles <= sms          ? DualGemmTile::bn256
                              : rows < 60 * sms        ? DualGemmTile::bn256_persistent
                                                       : DualGemmTile::bn256_persistent_mc2;
    EXPECT_EQ(k.up, want) << "B = " << b;
    EXPECT_EQ(k.router, EventHead::folded) << "B = " << b;
    EXPECT_EQ(k.row_groups, rows >= 60 * sms ? 2 : 1) << "B = " << b;
  }
  // A row too long for a warp's registers (d_model > 1024): the cuBLAS chain, one group.
  Config deep = cfg;
  deep.d_model = 2048;
  EXPECT_EQ(select_fused_config(deep, 64, {}).router, EventHead::cublas);
  EXPECT_EQ(select_fused_config(deep, 64, {}).row_groups, 1);
}

TEST(FusedConfig, PinnedOverTunedOverDefaults) {
  const Config cfg = Config::preset("default");
  FusedOptions o;
  o.tuned = {{1, parse_fused_choice("up=bn256_st4_sk1_mc1_p,router=folded,groups=1")},
             {16, parse_fused_choice("up=bn256_st4_sk1_mc1,router=folded,groups=3")}};
  EXPECT_EQ(select_fused_config(cfg, 4, o).up, DualGemmTile::bn256_persistent);  // the largest tuned B <= 4
  EXPECT_EQ(select_fused_config(cfg, 64, o).up, DualGemmTile::bn256);            // from the B = 16 entry
  EXPECT_EQ(select_fused_config(cfg, 64, o).row_groups, 3);
  o.pinned = parse_fused_choice("groups=2");
  EXPECT_EQ(select_fused_config(cfg, 64, o).row_groups, 2);
  EXPECT_EQ(select_fused_config(cfg, 1, pinned("up=bn256_st4_sk1_mc2_p")).up, DualGemmTile::bn256_persistent_mc2);
}

TEST(FusedConfig, RefusesAHeadThatChangesWithTheBatchAndChoicesThatCannotRun) {
  const Config cfg = Config::preset("default");
  FusedOptions mixed;
  mixed.tuned = {{1, parse_fused_choice("router=folded")}, {16, parse_fused_choice("router=cublas,groups=1")}};
  EXPECT_NO_THROW(select_fused_config(cfg, 4, mixed));
  try {
    select_fused_config(cfg, 16, mixed);
    ADD_FAILURE() << "a head switching with the batch size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch invariance"), std::string::npos) << e.what();
  }
  try {
    select_fused_config(cfg, 1, pinned("router=cublas,groups=2"));
    ADD_FAILURE() << "row groups with the cuBLAS head were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs router=folded"), std::string::npos) << e.what();
  }
  Config deep = cfg;
  deep.d_model = 2048;
  try {
    select_fused_config(deep, 1, pinned("router=folded"));
    ADD_FAILURE() << "the folded head was accepted with d_model = 2048";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d_model <= 1024"), std::string::npos) << e.what();
  }
}

// Whole 64-row blocks, at most the count asked for, none empty, covering every row once in order.
TEST(FusedConfig, RowGroupsAreWholeBlocksCoveringEveryRowOnce) {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(row_group_ranges(512, 1), (Ranges{{0, 512}}));
  EXPECT_EQ(row_group_ranges(512, 2), (Ranges{{0, 256}, {256, 256}}));
  EXPECT_EQ(row_group_ranges(512, 3), (Ranges{{0, 192}, {192, 192}, {384, 128}}));
  EXPECT_EQ(row_group_ranges(120, 2), (Ranges{{0, 64}, {64, 56}}));
  EXPECT_EQ(row_group_ranges(120, 8), (Ranges{{0, 64}, {64, 56}}));  // 2 blocks: 2 groups
  EXPECT_EQ(row_group_ranges(40, 4), (Ranges{{0, 40}}));
  for (int64_t rows : {1, 63, 64, 65, 640, 4607})
    for (int g = 1; g <= 8; ++g) {
      const Ranges r = row_group_ranges(rows, g);
      ASSERT_FALSE(r.empty());
      EXPECT_LE(r.size(), size_t(g));
      int64_t next = 0;
      for (const auto& [r0, n] : r) {
        EXPECT_EQ(r0, next) << rows << " rows, " << g << " groups";
        EXPECT_GT(n, 0);
        EXPECT_EQ(r0 % 64, 0);
        next = r0 + n;
      }
      EXPECT_EQ(next, rows);
    }
  EXPECT_THROW(row_group_ranges(512, 0), Error);
}

}  // namespace
}  // namespace swapffn::cuda
