//===- AtomicFile.cpp - whole files replaced atomically ---------------------===//
#include "pipemesh/runtime/AtomicFile.h"

#include "pipemesh/runtime/Error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace pipemesh::rt {

void writeFileAtomically(const std::string &path, const std::string &text,
                         const std::string &what) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail(what, ": cannot create '", tmp, "': ", std::strerror(errno));
  const char *p = text.data();
  size_t n = text.size();
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      int e = errno;
      ::close(fd);
      fail(what, ": cannot write '", tmp, "': ", std::strerror(e));
    }
    p += w;
    n -= (size_t)w;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    fail(what, ": cannot sync '", tmp, "': ", std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail(what, ": cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
}

} // namespace pipemesh::rt
