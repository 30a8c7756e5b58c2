#include "kv/prefix_cache.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include "util/error.h"

namespace spindle::kv {

bool PrefixCache::ChunkLess::operator()(std::span<const int32_t> a, std::span<const int32_t> b) const {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
}

PrefixCache::PrefixCache(PageAllocator& allocator, bool enabled) : allocator_(&allocator), enabled_(enabled) {
  SPINDLE_CHECK(allocator.evictor() == nullptr, "the page allocator already has an evictor");
  allocator.set_evictor(this);
}

PrefixCache::~PrefixCache() {
  if (allocator_->evictor() == this) allocator_->set_evictor(nullptr);
  release_subtree(root_);
}

void PrefixCache::release_subtree(Node& node) {
  for (auto& [key, child] : node.children) {
    release_subtree(*child);
    allocator_->set_cached(child->page, false);
  }
  node.children.clear();
}

std::vector<int32_t> PrefixCache::match(std::span<const TokenId> tokens) {
  ++stats_.num_lookups;
  stats_.num_lookup_tokens += tokens.size();
  std::vector<int32_t> pages;
  if (!enabled_) return pages;
  const size_t page_size = static_cast<size_t>(allocator_->page_size());
  const uint64_t now = ++clock_;
  Node* node = &root_;
  for (size_t begin = 0; begin + page_size <= tokens.size(); begin += page_size) {
    const auto it = node->children.find(tokens.subspan(begin, page_size));
    if (it == node->children.end()) break;
    node = it->second.get();
    node->last_access = now;
    pages.push_back(node->page);
  }
  if (!pages.empty()) ++stats_.num_hits;
  stats_.num_hit_tokens += pages.size() * page_size;
  return pages;
}

int PrefixCache::num_cached_pages(std::span<const TokenId> tokens) const {
  if (!enabled_) return 0;
  const size_t page_size = static_cast<size_t>(allocator_->page_size());
  const Node* node = &root_;
  int num_pages = 0;
  for (size_t begin = 0; begin + page_size <= tokens.size(); begin += page_size) {
    const auto it = node->children.find(tokens.subspan(begin, page_size));
    if (it == node->children.end()) break;
    node = it->second.get();
    ++num_pages;
  }
  return num_pages;
}

int PrefixCache::insert(std::span<const TokenId> tokens, const BlockTable& table) {
  SPINDLE_CHECK(&table.allocator() == allocator_, "the block table belongs to another allocator");
  SPINDLE_CHECK(tokens.size() <= static_cast<size_t>(table.num_tokens()),
                "cannot cache {} tokens from a block table of {} tokens", tokens.size(), table.num_tokens());
  if (!enabled_) return 0;
  const size_t page_size = static_cast<size_t>(allocator_->page_size());
  const uint64_t now = ++clock_;
  int num_inserted = 0;
  Node* node = &root_;
  for (size_t i = 0; (i + 1) * page_size <= tokens.size(); ++i) {
    const auto chunk = tokens.subspan(i * page_size, page_size);
    auto it = node->children.find(chunk);
    if (it == node->children.end()) {
      const int32_t page = table.pages()[i];
      SPINDLE_CHECK(!allocator_->is_cached(page), "page {} is already cached under another prefix", page);
      auto child = std::make_unique<Node>();
      child->key.assign(chunk.begin(), chunk.end());
      child->page = page;
      child->parent = node;
      allocator_->set_cached(page, true);
      it = node->children.emplace(child->key, std::move(child)).first;
      ++num_nodes_;
      ++num_inserted;
    }
    node = it->second.get();
    node->last_access = now;
  }
  stats_.num_inserted_pages += static_cast<uint64_t>(num_inserted);
  return num_inserted;
}

bool PrefixCache::evictable(const Node& node) const {
  return node.children.empty() && allocator_->ref_count(node.page) == 0;
}

int PrefixCache::evict_pages(int num_pages) {
  // Min-heap of evictable leaves by last access (ties: lower page id first, for determinism).
  using Entry = std::pair<std::pair<uint64_t, int32_t>, Node*>;
  auto later = [](const Entry& a, const Entry& b) { return a.first > b.first; };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> leaves(later);
  std::vector<Node*> stack = {&root_};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (auto& [key, child] : node->children) {
      if (evictable(*child)) leaves.push({{child->last_access, child->page}, child.get()});
      stack.push_back(child.get());
    }
  }
  int num_evicted = 0;
  while (num_evicted < num_pages && !leaves.empty()) {
    Node* node = leaves.top().second;
    leaves.pop();
    Node* parent = node->parent;
    allocator_->set_cached(node->page, false);
    parent->children.erase(parent->children.find(node->key));  // destroys node
    --num_nodes_;
    ++num_evicted;
    if (parent != &root_ && evictable(*parent)) leaves.push({{parent->last_access, parent->page}, parent});
  }
  stats_.num_evicted_pages += static_cast<uint64_t>(num_evicted);
  return num_evicted;
}

void PrefixCache::check_integrity() const {
  const size_t page_size = static_cast<size_t>(allocator_->page_size());
  std::vector<uint8_t> in_tree(static_cast<size_t>(allocator_->num_pages()), 0);
  int num_nodes = 0;
  std::vector<const Node*> stack = {&root_};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const auto& [key, child] : node->children) {
      SPINDLE_CHECK(child->parent == node, "prefix cache node of page {} has a wrong parent", child->page);
      SPINDLE_CHECK(child->key.size() == page_size && key == child->key,
                    "prefix cache node of page {} has a key of {} tokens (page size {})", child->page,
                    child->key.size(), page_size);
      SPINDLE_CHECK(child->page >= 0 && child->page < allocator_->num_pages(), "prefix cache holds page {} outside [0, {})",
                    child->page, allocator_->num_pages());
      SPINDLE_CHECK(!in_tree[child->page], "page {} is in the prefix cache twice", child->page);
      in_tree[child->page] = 1;
      SPINDLE_CHECK(allocator_->is_cached(child->page), "page {} is in the prefix cache but not marked cached",
                    child->page);
      ++num_nodes;
      stack.push_back(child.get());
    }
  }
  SPINDLE_CHECK(num_nodes == num_nodes_, "prefix cache counts {} nodes but holds {}", num_nodes_, num_nodes);
  for (int32_t page = 0; page < allocator_->num_pages(); ++page) {
    SPINDLE_CHECK(!allocator_->is_cached(page) || in_tree[page], "page {} is marked cached but is in no tree node",
                  page);
  }
  allocator_->check_integrity();
}

void check_integrity(const PrefixCache& cache, std::span<const BlockTable* const> live_tables) {
  cache.check_integrity();
  check_integrity(cache.allocator(), live_tables);
}

}  // namespace spindle::kv
