// Packed documents for the attention unit tests: token rows whose EOS tokens end documents of
// given lengths, and the DocumentMask the trainer would make of them.
#ifndef RINGTRAIN_TESTS_UNIT_PACKED_DOCUMENTS_H_
#define RINGTRAIN_TESTS_UNIT_PACKED_DOCUMENTS_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/engine/kernels/document_mask.h"

namespace ringtrain {

// Tokens (B, L) whose `eos` tokens end documents of the given lengths (cycled; the last document of
// a row runs off its end, so the next window would start mid-document). Row b starts `b` tokens
// into the cycle, so rows differ. No lengths: no EOS at all (plain causal).
inline at::Tensor PackedTokens(int64_t batch, int64_t length,
                               const std::vector<int64_t>& doc_lengths, int64_t eos) {
  auto tokens = torch::full({batch, length}, int64_t{7}, torch::kInt64);
  for (int64_t b = 0; b < batch && !doc_lengths.empty(); ++b) {
    int64_t end = -1;
    for (size_t i = size_t(b);; ++i) {
      end += doc_lengths[i % doc_lengths.size()];
      if (end >= length) break;
      tokens[b][end] = eos;
    }
  }
  return tokens;
}

inline std::shared_ptr<const DocumentMask> MaskOf(const at::Tensor& tokens, int64_t eos) {
  const at::Tensor t = tokens.contiguous();
  return std::make_shared<const DocumentMask>(
      MakeDocumentMask(t.data_ptr<int64_t>(), t.size(0), t.size(1), eos));
}

}  // namespace ringtrain

#endif  // RINGTRAIN_TESTS_UNIT_PACKED_DOCUMENTS_H_
