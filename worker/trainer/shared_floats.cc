#include "worker/trainer/shared_floats.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

absl::Status Failed(const std::string& what, const std::string& name, int error) {
  return absl::UnavailableError(absl::StrCat(what, " /dev/shm", name, ": ", std::strerror(error)));
}

// A float32 tensor over `bytes` mapped at `data`, unmapped with its last reference.
at::Tensor OverMapping(void* data, int64_t elements) {
  const size_t bytes = size_t(elements) * sizeof(float);
  return torch::from_blob(
      data, {elements}, [bytes](void* p) { munmap(p, bytes); }, torch::kFloat);
}

}  // namespace

std::string SharedFloatsName(int64_t owner_pid, int64_t nonce, int64_t slot) {
  return absl::StrCat("/ringtrain-snapshot-", owner_pid, "-", nonce, "-", slot);
}

absl::StatusOr<at::Tensor> CreateSharedFloats(const std::string& name, int64_t elements) {
  const size_t bytes = size_t(elements) * sizeof(float);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Failed("creating", name, errno);
  const int reserved = bytes == 0 ? 0 : posix_fallocate(fd, 0, off_t(bytes));
  void* data = MAP_FAILED;
  if (reserved == 0 && bytes > 0) {
    data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  }
  const int map_error = errno;
  close(fd);
  if (reserved != 0 || data == MAP_FAILED) {
    shm_unlink(name.c_str());
    if (reserved != 0) {
      return Failed(absl::StrCat("reserving ", bytes, " bytes of"), name, reserved);
    }
    return Failed("mapping", name, bytes == 0 ? EINVAL : map_error);
  }
  return OverMapping(data, elements);
}

absl::StatusOr<at::Tensor> OpenSharedFloats(const std::string& name, int64_t elements) {
  const size_t bytes = size_t(elements) * sizeof(float);
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return Failed("opening", name, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || size_t(st.st_size) != bytes || bytes == 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("/dev/shm", name, " holds ", st.st_size,
                                               " bytes, not the ", bytes, " expected"));
  }
  void* data = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int map_error = errno;
  close(fd);
  if (data == MAP_FAILED) return Failed("mapping", name, map_error);
  return OverMapping(data, elements);
}

void UnlinkSharedFloats(const std::string& name) { shm_unlink(name.c_str()); }

}  // namespace ringtrain
