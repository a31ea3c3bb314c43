// simt's driver: CUDA's virtual-memory functions on the host's own virtual memory. A reservation is
// an inaccessible range; a physical page is a memory file; mapping maps the file there (shared, so a
// page mapped at two addresses is one page) and cuMemSetAccess opens it. An address under no mapped
// page faults, as the GPU's would. Checked as the driver checks: a mapping over a mapped page, or
// outside a reservation, or an unmap of what was not mapped, fails.
#include <cuda.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string_view>

namespace {

constexpr std::size_t kGranularity = std::size_t(2) << 20;  // the GPU's: 2 MiB

std::mutex state;
std::map<CUdeviceptr, std::size_t> reserved;  // base → bytes
std::map<CUdeviceptr, std::size_t> mapped;    // base → bytes, each one cuMemMap
std::map<CUmemGenericAllocationHandle, std::size_t> pages;  // memory file → bytes

bool within(const std::map<CUdeviceptr, std::size_t>& ranges, CUdeviceptr p, std::size_t n) {
  auto it = ranges.upper_bound(p);
  if (it == ranges.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}

bool overlaps(const std::map<CUdeviceptr, std::size_t>& ranges, CUdeviceptr p, std::size_t n) {
  auto it = ranges.lower_bound(p);
  if (it != ranges.end() && it->first < p + n) return true;
  if (it == ranges.begin()) return false;
  --it;
  return it->first + it->second > p;
}

bool aligned(std::size_t v) { return v % kGranularity == 0; }

}  // namespace

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (device != 0 || attribute != CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) return CUDA_ERROR_INVALID_VALUE;
  *value = 1;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags) {
  if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop, unsigned long long flags) {
  if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || flags != 0 || size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  const int fd = memfd_create("simt-device-page", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Device memory starts as garbage: NaNs, as cudaMalloc's do, so that a read before a write shows.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::memset(p, 0xff, size);
  munmap(p, size);
  const std::lock_guard lock(state);
  *handle = static_cast<CUmemGenericAllocationHandle>(fd);
  pages[*handle] = size;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const std::lock_guard lock(state);
  if (!pages.erase(handle)) return CUDA_ERROR_INVALID_HANDLE;
  close(static_cast<int>(handle));  // its memory lives on under any mapping still there, as the driver's does
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, std::size_t size, std::size_t alignment, CUdeviceptr addr, unsigned long long flags) {
  if (size == 0 || !aligned(size) || addr != 0 || flags != 0 || (alignment && alignment != kGranularity)) return CUDA_ERROR_INVALID_VALUE;
  // Room to start the range on a page boundary; what lies before and after it is given back.
  void* m = mmap(nullptr, size + kGranularity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto raw = reinterpret_cast<std::uintptr_t>(m);
  const std::uintptr_t base = (raw + kGranularity - 1) / kGranularity * kGranularity;
  if (base > raw) munmap(m, base - raw);
  if (const std::uintptr_t end = raw + size + kGranularity; end > base + size) munmap(reinterpret_cast<void*>(base + size), end - base - size);
  const std::lock_guard lock(state);
  *ptr = base;
  reserved[base] = size;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, std::size_t size) {
  const std::lock_guard lock(state);
  const auto it = reserved.find(ptr);
  if (it == reserved.end() || it->second != size || overlaps(mapped, ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  reserved.erase(it);
  munmap(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  const std::lock_guard lock(state);
  const auto page = pages.find(handle);
  if (page == pages.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0 || !aligned(ptr) || size == 0 || !aligned(size) || offset + size > page->second || !within(reserved, ptr, size) ||
      overlaps(mapped, ptr, size))
    return CUDA_ERROR_INVALID_VALUE;
  // Mapped but not yet accessible: cuMemSetAccess opens it.
  if (mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, static_cast<int>(handle), static_cast<off_t>(offset)) == MAP_FAILED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  mapped[ptr] = size;
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t size) {
  const std::lock_guard lock(state);
  const auto it = mapped.find(ptr);
  if (it == mapped.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;  // one whole cuMemMap, as simt's callers unmap
  // Back to reserved and inaccessible.
  if (mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
    return CUDA_ERROR_INVALID_VALUE;
  mapped.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, std::size_t size, const CUmemAccessDesc* desc, std::size_t count) {
  if (count != 1 || !desc || desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc->location.id != 0) return CUDA_ERROR_INVALID_VALUE;
  const std::lock_guard lock(state);
  // Every page of the range must be mapped.
  for (CUdeviceptr p = ptr; p < ptr + size; p += kGranularity)
    if (!within(mapped, p, kGranularity)) return CUDA_ERROR_INVALID_VALUE;
  const int prot = desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                   : desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                     : PROT_NONE;
  return mprotect(reinterpret_cast<void*>(ptr), size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned version, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  struct Entry {
    std::string_view name;
    void* fn;
  };
  static const Entry entries[] = {
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(&cuDeviceGetAttribute)},
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity)},
      {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree)},
      {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
      {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess)},
  };
  *fn = nullptr;
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  if (version < 12000) {
    if (status) *status = cudaDriverEntryPointVersionNotSufficent;
    return cudaSuccess;
  }
  for (const Entry& e : entries)
    if (e.name == symbol) {
      *fn = e.fn;
      if (status) *status = cudaDriverEntryPointSuccess;
    }
  return cudaSuccess;
}
