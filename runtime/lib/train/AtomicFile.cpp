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
  // A failure removes the partial temporary: what was at `path` stays alone.
  auto failRemoving = [&](const char *doing, int err) {
    if (fd >= 0)
      ::close(fd);
    std::remove(tmp.c_str());
    fail(what, ": cannot ", doing, " '", tmp, "': ", std::strerror(err));
  };
  const char *p = text.data();
  size_t n = text.size();
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      failRemoving("write", errno);
    p += w;
    n -= (size_t)w;
  }
  if (::fsync(fd) != 0)
    failRemoving("sync", errno);
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0)
    failRemoving("sync", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    fail(what, ": cannot rename '", tmp, "' to '", path, "': ", std::strerror(e));
  }
}

} // namespace pipemesh::rt
