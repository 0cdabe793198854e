// A data-parallel training loop in the shape of Horovod's PyTorch example, in plain
// C++: linear regression on a synthetic data set sharded by rank. Rank 0's initial
// parameters are broadcast, gradients are averaged every step, the epoch loss is
// averaged across ranks, and rank 0 writes a checkpoint.
//   hvdrun -np 4 build/examples/train_sketch [epochs] [checkpoint-dir]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"

namespace {

constexpr int kFeatures = 16;
constexpr int kSamplesPerRank = 4096;
constexpr int kBatch = 64;

// The "true" model the data is drawn from; training should approach it.
float true_weight(int j) { return 0.5f * static_cast<float>(j % 5) - 1.0f; }
constexpr float kTrueBias = 0.25f;

}  // namespace

int main(int argc, char** argv) {
  try {
    hvdrun::init();
    const int rank = hvdrun::rank(), size = hvdrun::size();
    const int epochs = argc > 1 ? std::stoi(argv[1]) : 5;  // throws on a non-number
    const std::string ckpt_dir = argc > 2 ? argv[2] : ".";

    // This rank's shard of the data set (a different seed per rank).
    std::mt19937 rng(1234u + static_cast<unsigned>(rank));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(kSamplesPerRank) * kFeatures), y(kSamplesPerRank);
    for (int i = 0; i < kSamplesPerRank; ++i) {
      float t = kTrueBias;
      for (int j = 0; j < kFeatures; ++j) {
        float v = normal(rng);
        x[static_cast<std::size_t>(i) * kFeatures + j] = v;
        t += true_weight(j) * v;
      }
      y[static_cast<std::size_t>(i)] = t + 0.01f * normal(rng);
    }

    // Parameters: weights then bias. Every rank initialises differently; rank 0 wins.
    std::vector<float> params(kFeatures + 1);
    for (auto& p : params) p = normal(rng);
    hvdrun::broadcast(params.data(), params.size(), 0);

    // Scale the learning rate by the number of ranks, as Horovod's example does.
    const float lr = 0.01f * static_cast<float>(size);
    std::vector<float> grad(params.size());
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      double loss_sum = 0;
      for (int start = 0; start < kSamplesPerRank; start += kBatch) {
        std::fill(grad.begin(), grad.end(), 0.0f);
        for (int i = start; i < start + kBatch; ++i) {
          const float* xi = &x[static_cast<std::size_t>(i) * kFeatures];
          float pred = params[kFeatures];
          for (int j = 0; j < kFeatures; ++j) pred += params[static_cast<std::size_t>(j)] * xi[j];
          float err = pred - y[static_cast<std::size_t>(i)];
          loss_sum += 0.5 * err * err;
          for (int j = 0; j < kFeatures; ++j)
            grad[static_cast<std::size_t>(j)] += err * xi[j] / kBatch;
          grad[kFeatures] += err / kBatch;
        }
        // Average gradients across ranks, then step.
        hvdrun::allreduce(grad.data(), grad.data(), grad.size(), hvdrun::DataType::kFloat32,
                          hvdrun::ReduceOp::kAverage);
        for (std::size_t j = 0; j < params.size(); ++j) params[j] -= lr / size * grad[j];
      }
      // Average the metric across ranks.
      double loss = loss_sum / kSamplesPerRank;
      hvdrun::allreduce(&loss, &loss, 1, hvdrun::DataType::kFloat64, hvdrun::ReduceOp::kAverage);
      if (rank == 0) {
        std::printf("epoch %d: mean loss %.6f over %d ranks\n", epoch, loss, size);
        std::string path = ckpt_dir + "/checkpoint-" + std::to_string(epoch) + ".txt";
        std::ofstream out(path);
        for (float p : params) out << p << "\n";
        if (!out) throw std::runtime_error("cannot write checkpoint " + path);
      }
    }

    // Every rank holds the same parameters (they were updated with the same averages).
    std::vector<float> check = params;
    hvdrun::allreduce(check.data(), check.data(), check.size(), hvdrun::DataType::kFloat32,
                      hvdrun::ReduceOp::kMax);
    bool same = check == params;
    float max_err = 0;
    for (int j = 0; j < kFeatures; ++j)
      max_err = std::max(max_err, std::fabs(params[static_cast<std::size_t>(j)] - true_weight(j)));
    std::printf("rank %d: parameters %s across ranks, max weight error %.4f\n", rank,
                same ? "identical" : "DIFFER", static_cast<double>(max_err));
    hvdrun::shutdown();
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_sketch: %s\n", e.what());
    return 1;
  }
}
