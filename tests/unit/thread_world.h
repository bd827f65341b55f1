// Ranks as threads of one test process: each thread gets its own Communicator (Gloo groups) over
// one shared HashStore, so collectives run for real without processes or ports. For the unit tests.
#ifndef RINGTRAIN_TESTS_UNIT_THREAD_WORLD_H_
#define RINGTRAIN_TESTS_UNIT_THREAD_WORLD_H_

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "worker/engine/parallel/comm.h"
#include "worker/engine/parallel/mesh.h"

namespace ringtrain {

// Runs body(rank, comm) on `mesh.world` threads, rank r with `mesh` at rank r; an exception in a
// rank fails the test naming the rank. Returns when every rank is done. `stage_through_host` sends
// every tensor through host buffers, as Gloo does for CUDA ranks.
inline void RunOnMesh(const Mesh& mesh, const std::function<void(int64_t, Communicator&)>& body,
                      bool stage_through_host = false) {
  const int64_t world = mesh.world;
  // c10d's process-wide flight recorder updates a map outside its lock when a collective is
  // enqueued, which only bites when several process groups enqueue from different threads of one
  // process — exactly this setup (a trainer has one training thread). Off before the first group.
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        torch::set_num_threads(1);
        Mesh mine = mesh;
        mine.rank = r;
        auto comm = Communicator::CreateWithStore(mine, store, std::chrono::seconds(30), false,
                                                  stage_through_host);
        body(r, *comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// RunOnMesh with mesh (world, dp, cp = world / dp), replicated.
inline void RunOnThreads(int64_t world, int64_t dp,
                         const std::function<void(int64_t, Communicator&)>& body,
                         bool stage_through_host = false) {
  RunOnMesh(Mesh{0, world, dp, world / dp}, body, stage_through_host);
}

}  // namespace ringtrain

#endif  // RINGTRAIN_TESTS_UNIT_THREAD_WORLD_H_
