#pragma once
// The bookkeeping of a virtual weight tensor (ExpertWeave's; CUDA's virtual memory on the GPU): a
// layer's slots laid end to end in one reserved virtual range, so the grouped expert kernels see one
// contiguous tensor, with physical pages mapped only under slots that hold an expert. Slots need not
// be page-aligned: a page that two neighbouring slots share stays mapped while either holds one (a
// count per page), so no byte of padding is allocated. Pages come from one PagePool that every
// layer's tensor shares, and go back to it when unmapped. No device calls here: the backend maps
// and unmaps what these say.
#include <cstdint>
#include <optional>
#include <vector>

namespace mosaic {

class PageMap {
 public:
  // Throws InvalidArgument for a zero slot or page size or a negative slot count.
  PageMap(std::uint64_t slot_bytes, std::int64_t slots, std::uint64_t page_bytes);

  std::int64_t slots() const { return static_cast<std::int64_t>(occupied_.size()); }
  std::int64_t pages() const { return static_cast<std::int64_t>(references_.size()); }
  std::uint64_t reserved_bytes() const { return page_bytes_ * static_cast<std::uint64_t>(pages()); }  // the virtual range
  std::uint64_t slot_offset(std::int64_t slot) const { return slot_bytes_ * static_cast<std::uint64_t>(slot); }
  // The pages [first, last] under `slot`.
  std::int64_t first_page(std::int64_t slot) const;
  std::int64_t last_page(std::int64_t slot) const;

  // `slot` now holds an expert: the pages that were under no occupied slot and must be mapped
  // before it is written, ascending. Nothing when it was occupied already.
  std::vector<std::int64_t> occupy(std::int64_t slot);
  // `slot` holds nothing now: the pages no occupied slot covers any more, to be unmapped, ascending.
  std::vector<std::int64_t> vacate(std::int64_t slot);
  bool occupied(std::int64_t slot) const { return occupied_.at(static_cast<std::size_t>(slot)); }
  int references(std::int64_t page) const { return references_.at(static_cast<std::size_t>(page)); }
  std::int64_t mapped_pages() const { return mapped_; }

 private:
  void check_slot(std::int64_t slot) const;
  std::uint64_t slot_bytes_, page_bytes_;
  std::vector<bool> occupied_;
  std::vector<int> references_;  // [pages]: occupied slots over the page
  std::int64_t mapped_ = 0;
};

// The physical pages every layer's virtual tensor draws on: ids of one size, handed out up to a
// limit (the budget's pages), returned ones first; the backend creates a page's memory the first
// time its id is handed out and keeps it until the pool goes.
class PagePool {
 public:
  explicit PagePool(std::int64_t limit) : limit_(limit) {}
  struct Page {
    std::int64_t id;
    bool fresh;  // never handed out before: its memory is still to be created
  };
  // nullopt when `limit` pages are in use.
  std::optional<Page> acquire();
  void release(std::int64_t id);  // throws InvalidArgument for an id not in use
  std::int64_t in_use() const { return created_ - static_cast<std::int64_t>(free_.size()); }
  std::int64_t created() const { return created_; }
  std::int64_t limit() const { return limit_; }

 private:
  std::int64_t limit_, created_ = 0;
  std::vector<std::int64_t> free_;
  std::vector<bool> used_;
};

}  // namespace mosaic
