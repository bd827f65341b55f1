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

absl::Status Failed(const std::string& what, int error) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(error)));
}

// A float32 tensor over the mapping at `data`; unmapped (and `fd` closed, when one is given) with
// its last reference.
at::Tensor OverMapping(void* data, int64_t elements, int fd) {
  const size_t bytes = size_t(elements) * sizeof(float);
  return torch::from_blob(
      data, {elements},
      [bytes, fd](void* p) {
        munmap(p, bytes);
        if (fd >= 0) close(fd);
      },
      torch::kFloat);
}

}  // namespace

absl::StatusOr<SharedFloats> CreateSharedFloats(int64_t elements, bool populate) {
  const size_t bytes = size_t(elements) * sizeof(float);
  if (bytes == 0) return absl::InvalidArgumentError("shared memory of 0 floats");
  const int fd = memfd_create("ringtrain-snapshot", MFD_CLOEXEC);
  if (fd < 0) return Failed("creating shared memory (memfd_create)", errno);
  const int reserved = posix_fallocate(fd, 0, off_t(bytes));
  if (reserved != 0) {
    close(fd);
    return Failed(absl::StrCat("reserving ", bytes, " bytes of shared memory"), reserved);
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return Failed(absl::StrCat("mapping ", bytes, " bytes of shared memory"), error);
  }
  return SharedFloats{OverMapping(data, elements, fd), fd};
}

std::string SharedFloatsPath(int64_t pid, int64_t fd) {
  return absl::StrCat("/proc/", pid, "/fd/", fd);
}

absl::StatusOr<at::Tensor> OpenSharedFloats(const std::string& path, int64_t elements) {
  const size_t bytes = size_t(elements) * sizeof(float);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Failed(absl::StrCat("opening ", path), errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || size_t(st.st_size) != bytes || bytes == 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat(path, " holds ", st.st_size, " bytes, not the ", bytes, " expected"));
  }
  void* data = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (data == MAP_FAILED) return Failed(absl::StrCat("mapping ", path), error);
  return OverMapping(data, elements, -1);
}

}  // namespace ringtrain
