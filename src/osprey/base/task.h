// Task: a move-only `void()` callable. std::function needs copyable
// captures; tasks here carry unique_ptr hand-offs (a response frame, a call).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace osprey {

class Task {
 public:
  Task() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Task>>>
  Task(F&& f)  // NOLINT: implicit, so lambdas pass as Tasks
      : impl_(std::make_unique<Model<std::decay_t<F>>>(std::forward<F>(f))) {}
  Task(Task&&) noexcept = default;
  Task& operator=(Task&&) noexcept = default;

  void operator()() { impl_->Run(); }
  explicit operator bool() const { return impl_ != nullptr; }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual void Run() = 0;
  };
  template <class F>
  struct Model final : Concept {
    explicit Model(F&& f) : f(std::move(f)) {}
    explicit Model(const F& f) : f(f) {}
    void Run() override { f(); }
    F f;
  };
  std::unique_ptr<Concept> impl_;
};

}  // namespace osprey
