//===- Safetensors.cpp - safetensors blobs (read and write) ----------------===//
#include "pipemesh/runtime/Safetensors.h"

#include "pipemesh/runtime/Checksum.h"
#include "pipemesh/runtime/Error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace pipemesh::rt {

size_t safetensorsDTypeSize(const std::string &dtype) {
  if (dtype == "F32" || dtype == "I32" || dtype == "U32")
    return 4;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64")
    return 8;
  if (dtype == "BOOL" || dtype == "U8" || dtype == "I8")
    return 1;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16")
    return 2;
  return 0;
}

const char *safetensorsDType(DType t) {
  switch (t) {
  case DType::F32:
    return "F32";
  case DType::F64:
    return "F64";
  case DType::I64:
    return "I64";
  case DType::I32:
    return "I32";
  case DType::I1:
    return "BOOL";
  case DType::BF16:
    return "BF16";
  }
  return "?";
}

Safetensors Safetensors::parse(const uint8_t *data, uint64_t size, const std::string &what) {
  Safetensors st;
  if (size < 8)
    fail(what, ": truncated safetensors blob (", size, " bytes, the header length alone is 8)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = n << 8 | data[i];
  if (n > size - 8)
    fail(what, ": safetensors header of ", n, " bytes does not fit in the ", size,
         "-byte blob (truncated?)");
  const uint8_t *base = data + 8 + n;
  uint64_t dataBytes = size - 8 - n;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data + 8, data + 8 + n);
  } catch (const nlohmann::json::exception &e) {
    fail(what, ": safetensors header is not valid JSON: ", e.what());
  }
  if (!header.is_object())
    fail(what, ": safetensors header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &name = it.key();
    const nlohmann::json &v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        fail(what, ": safetensors __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        st.metadata[m.key()] =
            m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets") || !v["dtype"].is_string() || !v["shape"].is_array() ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      fail(what, ": safetensors entry '", name,
           "' needs dtype, shape and data_offsets [begin, end]");
    SafetensorsEntry e;
    e.dtype = v["dtype"].get<std::string>();
    size_t esize = safetensorsDTypeSize(e.dtype);
    if (!esize)
      fail(what, ": safetensors entry '", name, "' has unknown dtype ", e.dtype);
    int64_t numel = 1;
    for (const auto &d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        fail(what, ": safetensors entry '", name, "' has a bad shape ", v["shape"].dump());
      numel *= d.get<int64_t>();
      e.shape.push_back(d.get<int64_t>());
    }
    const auto &off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(what, ": safetensors entry '", name, "' has bad data_offsets ", off.dump());
    uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (b > end || end > dataBytes)
      fail(what, ": safetensors entry '", name, "' data [", b, ", ", end, ") lies outside the ",
           dataBytes, " data bytes (truncated?)");
    e.bytes = end - b;
    if (e.bytes != (uint64_t)numel * esize)
      fail(what, ": safetensors entry '", name, "' has ", e.bytes, " bytes but shape ",
           shapeStr(e.shape), " of ", e.dtype, " needs ", (uint64_t)numel * esize);
    e.data = base + b;
    st.tensors.emplace(name, std::move(e));
  }
  return st;
}

const SafetensorsEntry *Safetensors::find(const std::string &name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

void SafetensorsWriter::add(const std::string &name, const std::string &dtype, const Dims &shape,
                            const void *data, uint64_t bytes) {
  items.push_back({name, dtype, shape, data, bytes});
}

std::string SafetensorsWriter::header() const {
  // nlohmann::json sorts keys; safetensors readers do not care about order,
  // and data offsets follow insertion order.
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const Item &it : items) {
    h[it.name] = {
        {"dtype", it.dtype}, {"shape", it.shape}, {"data_offsets", {off, off + it.bytes}}};
    off += it.bytes;
  }
  if (!metadata.empty())
    h["__metadata__"] = metadata;
  std::string s = h.dump();
  while (s.size() % 8)
    s += ' ';
  return s;
}

uint64_t SafetensorsWriter::size() const {
  uint64_t n = 8 + header().size();
  for (const Item &it : items)
    n += it.bytes;
  return n;
}

static void writeAll(int fd, const void *data, uint64_t n, const std::string &what,
                     Checksum64 &sum) {
  sum.update(data, n);
  const char *p = static_cast<const char *>(data);
  while (n) {
    ssize_t w = ::write(fd, p, n > (1u << 30) ? (1u << 30) : n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      fail(what, ": write failed: ", std::strerror(errno));
    }
    p += w;
    n -= (uint64_t)w;
  }
}

uint64_t SafetensorsWriter::write(int fd, const std::string &what) const {
  std::string h = header();
  uint8_t len[8];
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i)
    len[i] = (uint8_t)(n >> (8 * i));
  Checksum64 sum;
  writeAll(fd, len, 8, what, sum);
  writeAll(fd, h.data(), h.size(), what, sum);
  for (const Item &it : items)
    writeAll(fd, it.data, it.bytes, what, sum);
  return sum.digest();
}

} // namespace pipemesh::rt
