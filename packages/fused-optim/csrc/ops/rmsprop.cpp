// RMSprop ops: argument checks and outputs; the element math and the kernel columns are in math/rmsprop.h.
#include <cmath>
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::RmspropHyper<double> MakeRmspropHyper(const char* op, double lr, double alpha, double eps, double weight_decay,
                                            double momentum, bool centered, bool maximize) {
  CheckNonNegative(op, {{"learning rate", lr},
                        {"epsilon", eps},
                        {"momentum", momentum},
                        {"weight_decay", weight_decay},
                        {"alpha", alpha}});
  math::RmspropHyper<double> h{};
  h.lr = lr, h.alpha = alpha, h.eps = eps, h.weight_decay = weight_decay, h.momentum = momentum;
  h.one_minus_alpha = 1.0 - alpha;
  h.lerp_small = std::abs(h.one_minus_alpha) < 0.5;
  h.centered = centered, h.maximize = maximize;
  h.has_l2 = weight_decay != 0.0;
  h.has_momentum = momentum > 0.0;
  return h;
}

constexpr const char* kNotCentered = "when centered=False";

void RmspropStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg square_avgs, TensorListArg grad_avgs,
                        TensorListArg momentum_buffers, TensorListArg state_steps, double lr, double alpha, double eps,
                        double weight_decay, double momentum, bool centered, bool maximize,
                        const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf,
                        bool capturable) {
  constexpr const char* op = "fused_optim::rmsprop_step_";
  const auto hyper = MakeRmspropHyper(op, lr, alpha, eps, weight_decay, momentum, centered, maximize);
  StepInPlace(op, FUSED_OPTIM_KERNEL(RmspropStep), hyper, params, grads,
              {{"square_avgs", square_avgs},
               {"grad_avgs", grad_avgs, centered, kNotCentered},
               {"momentum_buffers", momentum_buffers, hyper.has_momentum, kNoMomentum}},
              state_steps, {grad_scale, found_inf}, capturable);
}

Lists<4> RmspropUpdate(TensorListArg params, TensorListArg grads, TensorListArg square_avgs, TensorListArg grad_avgs,
                       TensorListArg momentum_buffers, double lr, double alpha, double eps, double weight_decay,
                       double momentum, bool centered, bool maximize) {
  constexpr const char* op = "fused_optim::rmsprop_update";
  const auto hyper = MakeRmspropHyper(op, lr, alpha, eps, weight_decay, momentum, centered, maximize);
  return Update(op, FUSED_OPTIM_KERNEL(RmspropStep), hyper, params, grads,
                {{"square_avgs", square_avgs},
                 {"grad_avgs", grad_avgs, centered, kNotCentered},
                 {"momentum_buffers", momentum_buffers, hyper.has_momentum, kNoMomentum}});
}

Lists<5> RmspropUpdateBackward(const OptionalTensorList& grad_new_params,
                               const OptionalTensorList& grad_new_square_avgs,
                               const OptionalTensorList& grad_new_grad_avgs,
                               const OptionalTensorList& grad_new_momentum_buffers, TensorListArg params,
                               TensorListArg grads, TensorListArg square_avgs, TensorListArg grad_avgs, double lr,
                               double alpha, double eps, double weight_decay, double momentum, bool centered,
                               bool maximize) {
  constexpr const char* op = "fused_optim::rmsprop_update_backward";
  const auto hyper = MakeRmspropHyper(op, lr, alpha, eps, weight_decay, momentum, centered, maximize);
  return UpdateBackward<5>(op, FUSED_OPTIM_KERNEL(RmspropBackward), hyper, params,
                           {{"grad_new_params", grad_new_params},
                            {"grad_new_square_avgs", grad_new_square_avgs},
                            {"grad_new_grad_avgs", grad_new_grad_avgs, centered},
                            {"grad_new_momentum_buffers", grad_new_momentum_buffers, hyper.has_momentum}},
                           {{"params", params},
                            {"grads", grads},
                            {"square_avgs", square_avgs},
                            {"grad_avgs", grad_avgs, centered, kNotCentered}},
                           {true, true, true, centered, hyper.has_momentum});
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(rmsprop, op) {
  op.Add<&RmspropStepInPlace>("rmsprop_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] square_avgs, Tensor(c!)[] grad_avgs, "
     "Tensor(d!)[] momentum_buffers, Tensor(e!)[] state_steps, *, float lr, float alpha, float eps, "
     "float weight_decay, float momentum, bool centered, bool maximize, " FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&RmspropUpdate>("rmsprop_update(Tensor[] params, Tensor[] grads, Tensor[] square_avgs, Tensor[] grad_avgs, "
     "Tensor[] momentum_buffers, *, float lr, float alpha, float eps, float weight_decay, float momentum, "
     "bool centered, bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
  op.Add<&RmspropUpdateBackward>("rmsprop_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_square_avgs, "
     "Tensor?[] grad_new_grad_avgs, Tensor?[] grad_new_momentum_buffers, Tensor[] params, Tensor[] grads, "
     "Tensor[] square_avgs, Tensor[] grad_avgs, *, float lr, float alpha, float eps, float weight_decay, "
     "float momentum, bool centered, bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
