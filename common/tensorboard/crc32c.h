// CRC-32C (Castagnoli, the polynomial iSCSI and TFRecord use) and TFRecord's masked form, which
// keeps a CRC stored next to the data it covers from looking like a CRC of itself.
#ifndef RINGTRAIN_COMMON_TENSORBOARD_CRC32C_H_
#define RINGTRAIN_COMMON_TENSORBOARD_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ringtrain {

// The CRC-32C of `data` (reflected, initial value and final xor 0xFFFFFFFF): "123456789" gives
// 0xE3069283.
uint32_t Crc32c(absl::string_view data);

// TFRecord's mask: rotate right by 15 bits, then add 0xA282EAD8.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TENSORBOARD_CRC32C_H_
