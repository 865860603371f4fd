"""Healthy: dynamic loss scaling written by hand, as mixed-precision training does it. The scale
starts too large, so the first backward passes overflow; the scaler sees non-finite gradients,
skips the optimizer step, zeroes the gradients and halves the scale, and grows it again after a
run of clean steps (which overflows again, and is handled again). The overflows are the scaler
working: counted as handled, never raised."""
import torch
import torch.nn.functional as F

from corpus_common import grads_finite, report, scaled_mlp


def main():
    net, batch = scaled_mlp(11)
    opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
    scale, clean, skipped, losses = 2.0 ** 126, 0, 0, []
    for _ in range(24):
        x, y = batch()
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        (loss * scale).backward()
        if not grads_finite(net.parameters()):
            scale, clean, skipped = scale / 2, 0, skipped + 1
            opt.zero_grad()                       # drop the overflowed gradients, skip the step
            continue
        for p in net.parameters():
            p.grad.div_(scale)
        opt.step()
        losses.append(loss.item())
        clean += 1
        if clean == 6 and scale < 2.0 ** 125:   # grow again after a run of clean steps
            scale, clean = scale * 2, 0
    if skipped == 0 or not losses:
        raise SystemExit("healthy_loss_scaler: expected overflowed steps and clean ones")
    report("healthy_loss_scaler", losses)
    print("skipped steps:", skipped)


if __name__ == "__main__":
    main()
