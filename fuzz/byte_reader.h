// Reads structured values off the front of a fuzz input, so a mutated byte changes one choice
// rather than the framing of everything after it. Past the end every read returns zero / empty:
// any input, however short, decodes to something.
#ifndef RINGTRAIN_FUZZ_BYTE_READER_H_
#define RINGTRAIN_FUZZ_BYTE_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringtrain::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }

  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }

  // A value in [0, n); n > 0.
  size_t Below(size_t n) { return Byte() % n; }

  // A length byte, then that many bytes (fewer at the end of the input).
  std::string Text() {
    size_t n = Byte();
    if (n > size_ - pos_) n = size_ - pos_;  // pos_ <= size_ always
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace ringtrain::fuzz

#endif  // RINGTRAIN_FUZZ_BYTE_READER_H_
