// Micro-batch shapes. The random draws reproduce CPython's `random` module bit for bit (MT19937
// seeded by init_by_array, random() from two 32-bit words, normalvariate by Kinderman-Monahan),
// because the reference recordings drew their lengths that way.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "engine/workload/workload.h"

namespace fragscope::workload {
namespace {

class PythonRandom {
 public:
  explicit PythonRandom(std::uint64_t seed) {
    // random.seed(int): the absolute value split into 32-bit words, least significant first.
    std::array<std::uint32_t, 2> key{static_cast<std::uint32_t>(seed & 0xffffffffU),
                                     static_cast<std::uint32_t>(seed >> 32)};
    init_by_array(key.data(), seed >> 32 ? 2 : 1);
  }

  double random() {
    const std::uint32_t a = next() >> 5;
    const std::uint32_t b = next() >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
  }

  double normalvariate(double mu, double sigma) {
    const double magic = 4 * std::exp(-0.5) / std::sqrt(2.0);
    double z = 0;
    while (true) {
      const double u1 = random();
      const double u2 = 1.0 - random();
      z = magic * (u1 - 0.5) / u2;
      if (z * z / 4.0 <= -std::log(u2))
        break;
    }
    return mu + z * sigma;
  }

  // random.randint(lo, hi): rejection sampling on getrandbits, as CPython's _randbelow does.
  int randint(int lo, int hi) {
    const auto n = static_cast<std::uint32_t>(hi - lo + 1);
    int bits = 0;
    for (std::uint32_t v = n; v != 0; v >>= 1)
      ++bits;
    std::uint32_t r = 0;
    do {
      r = next() >> (32 - bits);
    } while (r >= n);
    return lo + static_cast<int>(r);
  }

 private:
  static constexpr int kN = 624;
  std::array<std::uint32_t, kN> mt_{};
  int index_ = kN + 1;

  void init_genrand(std::uint32_t s) {
    mt_[0] = s;
    for (int i = 1; i < kN; ++i)
      mt_[static_cast<std::size_t>(i)] =
          1812433253U * (mt_[static_cast<std::size_t>(i - 1)] ^
                         (mt_[static_cast<std::size_t>(i - 1)] >> 30)) +
          static_cast<std::uint32_t>(i);
    index_ = kN;
  }

  void init_by_array(const std::uint32_t* key, std::size_t length) {
    init_genrand(19650218U);
    std::size_t i = 1;
    std::size_t j = 0;
    for (std::size_t k = std::max<std::size_t>(kN, length); k != 0; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] +
               static_cast<std::uint32_t>(j);
      ++i;
      ++j;
      if (i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
      if (j >= length)
        j = 0;
    }
    for (std::size_t k = kN - 1; k != 0; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) -
               static_cast<std::uint32_t>(i);
      ++i;
      if (i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
    }
    mt_[0] = 0x80000000U;
  }

  std::uint32_t next() {
    if (index_ >= kN) {
      for (int k = 0; k < kN; ++k) {
        const std::uint32_t y = (mt_[static_cast<std::size_t>(k)] & 0x80000000U) |
                                (mt_[static_cast<std::size_t>((k + 1) % kN)] & 0x7fffffffU);
        mt_[static_cast<std::size_t>(k)] = mt_[static_cast<std::size_t>((k + 397) % kN)] ^
                                           (y >> 1) ^ ((y & 1U) ? 0x9908b0dfU : 0U);
      }
      index_ = 0;
    }
    std::uint32_t y = mt_[static_cast<std::size_t>(index_++)];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= y >> 18;
    return y;
  }
};

int round_up(int value, int multiple) {
  return multiple <= 1 ? value : (value + multiple - 1) / multiple * multiple;
}

// One sample's length from the distribution (CPython: min(max, max(min, int(draw)))).
int draw_length(const SeqLenSpec& spec, PythonRandom& rng) {
  switch (spec.kind) {
    case SeqLenKind::fixed:
    case SeqLenKind::list:
      return spec.value;
    case SeqLenKind::uniform:
      return rng.randint(spec.min, spec.max);
    case SeqLenKind::lognormal: {
      const double draw = std::exp(rng.normalvariate(std::log(spec.median), spec.sigma));
      const double clipped = std::max<double>(spec.min, std::trunc(draw));
      return static_cast<int>(std::min<double>(spec.max, clipped));
    }
  }
  return spec.value;
}

}  // namespace

std::vector<MicroBatch> micro_batches(const Training& training) {
  const SeqLenSpec& spec = training.seq_len;
  PythonRandom rng(spec.seed);
  std::vector<MicroBatch> out;
  out.reserve(static_cast<std::size_t>(training.steps) *
              static_cast<std::size_t>(training.grad_accum));
  for (int step = 0; step < training.steps; ++step) {
    const int growth = training.batch_size_growth_every > 0
                           ? (step / training.batch_size_growth_every) * training.batch_size_growth
                           : 0;
    const int batch = training.batch_size + growth;
    for (int micro = 0; micro < training.grad_accum; ++micro) {
      int length = 0;
      if (spec.kind == SeqLenKind::list) {
        length = spec.values[out.size() % spec.values.size()];
      } else if (spec.collation == Collation::pack) {
        length = spec.kind == SeqLenKind::fixed ? spec.value : spec.max;
      } else if (spec.collation == Collation::pad_to_max) {
        for (int sample = 0; sample < batch; ++sample)
          length = std::max(length, draw_length(spec, rng));
      } else {
        length = draw_length(spec, rng);
      }
      out.push_back(MicroBatch{batch, round_up(length, spec.round_to)});
    }
  }
  return out;
}

}  // namespace fragscope::workload
