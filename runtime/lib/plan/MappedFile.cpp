//===- MappedFile.cpp - read-only memory-mapped files ----------------------===//
#include "pipemesh/runtime/MappedFile.h"

#include "pipemesh/runtime/Error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pipemesh::rt {

std::shared_ptr<MappedFile> MappedFile::open(const std::string &path, const std::string &what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail(what, " '", path, "': cannot open: ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(what, " '", path, "': cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(what, " '", path, "' is not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->filePath = path;
  f->length = (uint64_t)st.st_size;
  if (f->length) {
    void *p = mmap(nullptr, f->length, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(what, " '", path, "': cannot map: ", std::strerror(e));
    }
    f->bytes = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (bytes)
    munmap(const_cast<uint8_t *>(bytes), length);
}

} // namespace pipemesh::rt
