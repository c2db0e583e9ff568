// The CPU communicator across forked processes: collectives bit-exact (the rank-order sum on every
// rank), chunking past the slot size, and a dead or aborting rank failing the others by name.
#include "core/shm_communicator.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "core/half.h"
#include "core/splitmix64.h"
#include "core/status.h"

namespace pagoda {
namespace {

/// Runs body(comm) in `world` forked ranks; returns each rank's exit status (0: body returned
/// true). A rank's failure message goes to stderr.
std::vector<int> run_ranks(int world, size_t slot_bytes,
                           const std::function<bool(ShmCommunicator&)>& body) {
  auto group = ShmGroup::create(world, slot_bytes);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 1;
      try {
        ShmCommunicator comm(group, r);
        code = body(comm) ? 0 : 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 2;
      }
      ::_exit(code);
    }
    group->set_pid(r, pid);
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

/// Rank r's input: floats of widely different magnitudes, so that another summation order would
/// give other bits.
std::vector<float> rank_input(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t state = 1000 + static_cast<uint64_t>(rank) * 1000003;
  for (float& x : v) {
    const double u = static_cast<double>(splitmix64(state++) >> 11) / 9007199254740992.0;  // [0, 1)
    const int e = static_cast<int>(splitmix64(state++) % 40) - 20;
    x = static_cast<float>((u - 0.5) * std::ldexp(1.0, e));
  }
  return v;
}

TEST(ShmCommunicatorTest, AllReduceIsTheRankOrderSumOnEveryRank) {
  for (const int world : {2, 3, 4}) {
    // 1000 floats through 256-byte slots: 16 chunks, the last one partial.
    const int64_t n = 1000;
    const auto codes = run_ranks(world, 256, [&](ShmCommunicator& comm) {
      std::vector<float> data = rank_input(comm.rank(), n);
      comm.all_reduce_sum(data.data(), n, DType::kF32);
      std::vector<float> want = rank_input(0, n);
      for (int r = 1; r < world; ++r) {
        const std::vector<float> other = rank_input(r, n);
        for (int64_t i = 0; i < n; ++i)
          want[static_cast<size_t>(i)] += other[static_cast<size_t>(i)];
      }
      return std::memcmp(data.data(), want.data(), n * sizeof(float)) == 0;
    });
    EXPECT_EQ(codes, std::vector<int>(static_cast<size_t>(world), 0)) << world << " ranks";
  }
}

TEST(ShmCommunicatorTest, Bf16AllReduceSumsInFp32AndRoundsOnce) {
  const int world = 3;
  const int64_t n = 300;
  const auto codes = run_ranks(world, 128, [&](ShmCommunicator& comm) {
    auto to_bf16 = [&](int rank) {
      std::vector<uint16_t> v;
      for (const float x : rank_input(rank, n)) v.push_back(float_to_bf16(x));
      return v;
    };
    std::vector<uint16_t> data = to_bf16(comm.rank());
    comm.all_reduce_sum(data.data(), n, DType::kBF16);
    const auto a = to_bf16(0), b = to_bf16(1), c = to_bf16(2);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      const float sum = (bf16_to_float(a[i]) + bf16_to_float(b[i])) + bf16_to_float(c[i]);
      if (data[i] != float_to_bf16(sum)) return false;
    }
    return true;
  });
  EXPECT_EQ(codes, std::vector<int>(3, 0));
}

TEST(ShmCommunicatorTest, AllGatherBroadcastAndBarrier) {
  const int world = 4;
  const auto codes = run_ranks(world, 64, [&](ShmCommunicator& comm) {
    // 100 bytes per rank through 64-byte slots.
    std::vector<unsigned char> in(100), out(400);
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = static_cast<unsigned char>(comm.rank() * 100 + i);
    comm.all_gather(in.data(), out.data(), in.size());
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < 100; ++i)
        if (out[static_cast<size_t>(r) * 100 + i] != static_cast<unsigned char>(r * 100 + i))
          return false;
    std::vector<int32_t> b(50, comm.rank() == 2 ? 7 : -1);
    comm.broadcast(b.data(), b.size() * sizeof(int32_t), 2);
    for (const int32_t x : b)
      if (x != 7) return false;
    comm.barrier();
    return comm.world_size() == world;
  });
  EXPECT_EQ(codes, std::vector<int>(4, 0));
}

// all_gather_range: each pair of ranks reads only its own pair's chunks (the -dcp groups), through
// slots smaller than a chunk; the base class's version (all of them, then the range) agrees.
TEST(ShmCommunicatorTest, AllGatherRangeReadsItsGroupOnly) {
  const int world = 4;
  const auto codes = run_ranks(world, 64, [&](ShmCommunicator& comm) {
    std::vector<unsigned char> in(100), out(200, 0), via_base(200, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(comm.rank() * 50 + i);
    const int first = comm.rank() / 2 * 2;
    comm.all_gather_range(in.data(), out.data(), in.size(), first, 2);
    comm.Communicator::all_gather_range(in.data(), via_base.data(), in.size(), first, 2);
    for (int m = 0; m < 2; ++m)
      for (size_t i = 0; i < 100; ++i)
        if (out[static_cast<size_t>(m) * 100 + i] !=
            static_cast<unsigned char>((first + m) * 50 + i))
          return false;
    return out == via_base;
  });
  EXPECT_EQ(codes, std::vector<int>(4, 0));
}

TEST(ShmCommunicatorTest, ADeadRankFailsTheOthersNamingIt) {
  const auto codes = run_ranks(3, 256, [&](ShmCommunicator& comm) {
    float x = 1.0f;
    comm.all_reduce_sum(&x, 1, DType::kF32);  // all alive
    if (comm.rank() == 2) ::_exit(3);         // dies before the second collective
    try {
      comm.all_reduce_sum(&x, 1, DType::kF32);
    } catch (const Internal& e) {
      return std::strstr(e.what(), "tensor-parallel rank 2 (pid") != nullptr;
    }
    return false;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 3}));
}

TEST(ShmCommunicatorTest, AnAbortFailsEveryLaterCollective) {
  const auto codes = run_ranks(2, 256, [&](ShmCommunicator& comm) {
    if (comm.rank() == 1) {
      comm.abort("a bad batch");
    }
    for (int i = 0; i < 2; ++i) {
      try {
        comm.barrier();
        return false;
      } catch (const Internal& e) {
        if (std::strstr(e.what(), "tensor-parallel rank 1 failed: a bad batch") == nullptr)
          return false;
      }
    }
    return true;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace pagoda
