// place_gpu_rank (runtime/device_model.h): rank r on GPU r % device count, NCCL only when every
// rank has a GPU of its own, the host-staged communicator otherwise; each rank's share of its GPU.
#include <gtest/gtest.h>

#include "core/status.h"
#include "runtime/device_model.h"

namespace pagoda {
namespace {

TEST(GpuPlacement, OneRankNeedsNoCommunicator) {
  const GpuPlacement p = place_gpu_rank(0, 1, 8, true);
  EXPECT_EQ(p.device, 0);
  EXPECT_EQ(p.comm, GpuCommunicator::kNone);
  EXPECT_EQ(p.ranks_on_device, 1);
}

TEST(GpuPlacement, TwoRanksOnOneGpuShareItThroughTheHost) {
  for (int rank = 0; rank < 2; ++rank) {
    const GpuPlacement p = place_gpu_rank(rank, 2, 1, /*have_nccl=*/true);
    EXPECT_EQ(p.device, 0);
    EXPECT_EQ(p.comm, GpuCommunicator::kStaged);
    EXPECT_EQ(p.ranks_on_device, 2);
  }
}

TEST(GpuPlacement, ARankPerGpuUsesNccl) {
  for (int rank = 0; rank < 4; ++rank) {
    const GpuPlacement p = place_gpu_rank(rank, 4, 8, true);
    EXPECT_EQ(p.device, rank);
    EXPECT_EQ(p.comm, GpuCommunicator::kNccl);
    EXPECT_EQ(p.ranks_on_device, 1);
  }
  // Without NCCL in the build the staged communicator serves one rank per GPU too.
  EXPECT_EQ(place_gpu_rank(1, 2, 2, false).comm, GpuCommunicator::kStaged);
}

TEST(GpuPlacement, MoreRanksThanGpusWrapAround) {
  // 5 ranks on 2 GPUs: ranks 0, 2, 4 on GPU 0 and ranks 1, 3 on GPU 1.
  const int want_device[] = {0, 1, 0, 1, 0};
  const int want_sharing[] = {3, 2, 3, 2, 3};
  for (int rank = 0; rank < 5; ++rank) {
    const GpuPlacement p = place_gpu_rank(rank, 5, 2, true);
    EXPECT_EQ(p.device, want_device[rank]) << rank;
    EXPECT_EQ(p.ranks_on_device, want_sharing[rank]) << rank;
    EXPECT_EQ(p.comm, GpuCommunicator::kStaged) << rank;
  }
  EXPECT_THROW((void)place_gpu_rank(2, 2, 1, true), Internal);
}

}  // namespace
}  // namespace pagoda
