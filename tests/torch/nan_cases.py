"""Small training loops for the NaN/Inf tests (test_torch.py NanOrigin). One mode per case:

  log0       an entropy metric (p * log p, p with exact zeros) each step: log makes -inf from
             finite inputs (the origin, on the line marked ORIGIN), mul makes NaN of it.
  param_nan  a weight is NaN before training starts: every op propagates it, none makes it.
  mask       causal attention with an additive -inf mask (baddbmm + softmax): healthy.
  stale      each step a buffer holds NaN bytes that no floating op made (written through an
             int32 view, as memory holds stale bytes from its last use), is looked at through
             one-element float views (select, as_strided) restrided in place (unsqueeze_,
             as_strided_), then overwritten before use, the way kernels view and restride fresh
             output memory before filling it (torch.max(x, dim)): healthy.
  finite_checks  each step the job checks its weights and inputs for non-finite values
             (torch.isfinite, torch.isinf, != inf) and prints a tensor: comparisons against a
             Python inf make one-element tensors holding it, which no op computed: healthy.
  oneoff     a recall metric each step, hits / count of class 3: on one step the batch has no
             class 3 and the division makes NaN (0/0) from finite integer counts, once (the
             origin, on the line marked ONEOFF); no later step repeats it.
  oneoff2    oneoff's recall (the line marked ONEOFF2A, 0/0 on step 2) and a precision (the line
             marked ONEOFF2B, 0/0 on step 3, nothing predicted as class 1): two defects, the
             same op at two lines.
  listinputs  a score each step from an op whose operands come as a list (einsum): on one step
             it overflows to Inf from finite inputs, once. The sentinel judges the inputs of the
             ops that return it after they ran, a list's included.
  poison     a one-off NaN inside the forward pass: on step 1 a feature scale is the square root
             of a negative number (the line marked POISON; its operand, a temporary, is gone
             once sqrt returns). The loss is NaN and the optimizer step spreads it into every
             weight: from then on every op receives NaN and none makes it.
  busy_poison  the same after 3000 tiny ops a step (x + 0.0, exact), 300 000 before the first:
             an op rate at which the adapter does not keep the ops it ran unless told to
             (nan_origin.look_back).
  busy_cat_poison  the same after 1500 concatenations of 64 small tensors a step (20 000 before
             the first): 30 000 to 100 000 ops a second, where keeping each op (a note of each of
             its 64 inputs) takes more of the thread's time than the adapter allows itself.
  long_poison  poison's one-off, then 5000 tiny ops on another tensor before the loss: more
             ops than the 4096 the adapter keeps at first, which it grows to hold a step's.
             long_poison0: the same on step 0, before any step told it how many to keep.
  gru_h0     a GRU whose initial state has a NaN written into part of it on step 1 (sqrt of a
             negative number, the line marked H0); a nan_inf check of an addmm inside the GRU
             op starts the search, where nothing held shows the origin yet: the GRU's result,
             when it returns, does.
  grad_of    a penalty log(w) on the outputs' mean magnitudes, w scaled to 0 on step 1 (the line
             marked GRADOF): log makes -inf from finite inputs in the forward pass, and its
             gradient, 1/w, Inf from finite inputs in the same step's backward pass.
  slice_write  a regression target filled slice by slice into a preallocated buffer
             (target[i:j] = log(w[i:j]), as a box encoding or a decoder's steps fill theirs):
             on step 1 one w is 0 (the line marked SLICE) and the target holds -inf, once; the
             slices' results are gone, only the buffer holds what they wrote. A weighting of the
             target by 0 then makes NaN of that -inf: the origin's spread, no origin of its own.
  masked_row  attention weights over 8 slots (softmax), one query's row masked entirely with
             -inf on step 1 (the line marked MASKED; the masked scores are a temporary): that
             row's softmax is NaN, made from Inf; the decoded rows are written one by one into
             a preallocated buffer; Adam then spreads NaN through its moments.
  spectrum  poison's one-off (the line marked SPECTRUM), then the features' circular
             autocorrelation through the FFT (rfft, a product of complex spectra, irfft, as
             Autoformer's attention): the NaN reaches irfft through complex tensors.
  normaliser  a log-likelihood against a logsumexp normaliser (as a CRF's): on step 1 every
             score is -inf, and `llh = gold - normaliser` (the line marked NORMALISER) makes NaN
             from Inf; the backward pass's LogsumexpBackward0 makes NaN from Inf again with a
             subtraction of its own, on another line.
  inf_row    token features through an embedding and an LSTM; on step 1 one embedding row holds
             +inf (the line marked INFROW): the LSTM's gates saturate and its outputs stay
             finite, but the input weights' gradient, zero gradients times the +inf feature,
             is NaN (made in the backward pass from an Inf read in the forward pass); gradient
             clipping's norm sees it.
  numpy_row  each step's batch comes from numpy (memory no op made); on step 1 one row is
             replaced by an expression of it with the square root of a negative number (the line
             marked NUMPYROW), its temporaries gone: the data's values are not known to fumi, so
             no origin can be claimed, but the ops looked back through are named.
  zero_rows  features normalised by their rows' norms, four rows all zero (padding), the norm
             guarded by clamp_min: torch's NormBackward1 divides by the norm, 0/0 at those rows,
             and masks the NaN out at once, every step (healthy); so does a penalty's own
             backward (Square: 2 g x^2 / x, kept by a where only where x is not 0). On step 1 a
             gate's exp
             overflows (the line marked ZEROROWS): its gradient, 0 * inf, is the NaN; the gate's
             temperature's gradient (a sum to one element) starts the search in the backward
             pass, before NormBackward1 makes its 0/0.
  two_gates  zero_rows' gate twice, on two halves of the batch (a link predictor's positive and
             negative edges), without the norms: on step 1 both exps overflow (the line marked
             TWOGATES) and each gate's gradient, 0 * inf, is NaN; the temperature's gradient
             sums both.
  far_gate   two_gates' overflow on one gate, the distance scaled by the temperature and the
             exp's argument divided by a constant (a hyperbolic link predictor's decoder): on step
             1 the exp overflows (the line marked FARGATE); its gradient's 0 * inf is NaN, divided
             by the constant in the backward pass, and the temperature's gradient sums it.
  overflow_sum  a knowledge-graph score (ComplEx: products of entity and relation embeddings,
             summed over the dimensions) in the loss as -logsigmoid(-score); on step 1 the
             entity embeddings are scaled by 1e13 (a diverged update, the line marked OVERFLOW):
             the products overflow to +-inf, their sum is NaN, and the `neg` holding it makes no
             NaN of finite values.
  where_sqrt  an angular margin's sine as torch.where(s2 > 0, sqrt(s2), 0), s2 = 1 - cos^2 of
             normalised features and class weights; on step 1 the weights are imprinted from
             features (the line marked IMPRINT), some cosines round past 1, and the sqrt makes
             NaN the where drops (the line marked WHERESQRT): the forward pass and the loss stay
             finite, the sqrt's gradient is NaN, and the optimizer writes it into the weights;
             the next step's loss shows it, after the step that made it.
  custom_bwd  a gradient reversal (a custom autograd Function) whose backward normalises the
             reversed gradient by its norm (the line marked CUSTOMBWD); on step 1 the branch's
             weight is 0, its gradient all zero, and the backward makes 0/0, in user code. No
             sentinel sees a gradient; Adam's update writes the NaN into the first layer and its
             moments, and the next step's loss shows it. No loss scaler: nothing handles it.
  custom_bwd_bn  the same behind a batch norm (a DANN-like feature extractor): what it writes into
             its running statistics in place on the next step is no input of the step before's
             backward.
  cosine_bn  a cosine head, sqrt((f*f).sum()).clamp_min(eps), behind a batch norm; on step 1
             one sample's features are dropped (the line marked COSINE): finite forward, the
             sqrt's backward 0/0 (SAM, batch 25). The batch norm's backward reads the mean and
             inverse deviation its caller does not return.
  cosine_gpt  the same after a causal self-attention over an embedding of tokens drawn each
             step (masked_fill of -inf, softmax; the tokens gone with the backward pass): neither
             the mask's -inf nor the integer tokens are where the gradient's NaN came from.
  cosine_ln  the same behind a layer norm (a transformer's final norm before its head). Both
             clip the gradients' norm: its sentinel sees them in the step they were made.
  checkpoint  a segment run under torch.utils.checkpoint adds log(sigmoid(h)) (the line marked
             CHECKPOINT); on step 1 one sample is 1e4 times larger: log(0) = -inf, the
             segment's result gone, the loss NaN; its recomputation in the backward pass makes
             it again.
  sam        sharpness-aware minimisation: after the backward pass, the weights climb along the
             gradient normalised by its norm (p += rho g / |g|), the gradients are zeroed, and a
             second pass computes the update's; a cosine head as cosine_bn's on step 1 (the line
             marked SAM): the climb reads the NaN gradient into the weights before zero_grad.
  grad_hook  a critic stepped by its own optimizer every other step, its first weight's gradient
             un-weighted in place by a hook (grad.div_(lam), the line marked GRADHOOK) while its
             loss's weight decays: 0/0 on step 4; the program's own step reads the critic's
             NaN weights.
  schedule   a diffusion model's noise target (x_t - a_t x) / b_t, its schedule made before the
             loop and indexed as b[t, None] (a view of it, gone as `index` returns); b_0 is 0,
             and on step 1 t = 0 is drawn: 0/0 (the line marked SCHEDULE).
  two_callers  a module dividing its input by a scale, called from two lines; on step 1 the
             second call's scale is 0 (the division marked TWOCALLERS, called at SECONDCALL):
             Inf from finite values once, the op never making it again.
  zero_norm  a weight normalised by its norm (v / |v|, the line marked ZERONORM), v all zero
             from step 1 on: 0/0 in the forward pass, and the division's backward makes NaN of
             finite values too.
  raise_empty  each step scales the features by their largest magnitude among those in range;
             on step 1 every feature is the square root of a negative number (the line marked
             RAISE): nothing is in range, and `max` of the empty selection raises. The program
             dies of its NaN with no loss or one-element result having held it.
  isnan_guard  each step the hidden features are normalised along the batch (a feature's
             column divided by its norm); on step 2 feature 5 is gated to zero and its column is
             0/0 (the line marked GUARDDIV). The program's own check, `torch.isnan(h).any()`
             (the line marked GUARD), raises: the job dies of its NaN before any loss or
             one-element result held it. isfinite_guard: the same check as
             `assert torch.isfinite(h).all()` (the line marked GUARDF).
  nan_data   every step the batch has missing values (NaN the program put there, as data
             with gaps has), which it checks for with `torch.isnan(batch).any()` and replaces
             with 0 before use: healthy.
  adam_state  Adam; on step 0 the first layer's gradient is scaled by 1e38 (a loss scale gone
             wrong; the line marked ADAMSTATE): its second moment overflows to +inf, and from
             then on that layer's update is m / inf = 0, for good. No NaN, the loss stays finite.
  adam_state3  the same on step 3, an optimizer step whose state fumi does not look at: the
             Inf is seen on a later one.
  adam_nan_grad  Adam; on step 0 one gradient element is NaN (the program's constant, the line
             marked ADAMNAN): the optimizer passes it into its moments, and makes nothing.
Prints one loss per step so tests can compare runs with and without fumi."""
import sys

import numpy
import torch
import torch.utils.checkpoint

mode = sys.argv[1]
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 16)
y = torch.randint(0, 4, (64,))
if mode == "param_nan":
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
mask = torch.triu(torch.full((8, 8), float("-inf")), diagonal=1)
q_proj = torch.nn.Linear(16, 16)
if mode == "mask":
    opt = torch.optim.SGD(list(model.parameters()) + list(q_proj.parameters()), lr=0.1)
if mode == "masked_row":
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
gru = torch.nn.GRU(16, 16, 2, bidirectional=True)
sequence = torch.randn(30, 64, 16)
lengths = torch.sort(torch.randint(3, 31, (64,)), descending=True)[0].tolist()
if mode == "gru_h0":
    opt = torch.optim.SGD(list(model.parameters()) + list(gru.parameters()), lr=0.1)
emb = torch.nn.Embedding(50, 16)
lstm = torch.nn.LSTM(16, 16, batch_first=True)
tokens = torch.randint(0, 50, (64, 6))
temperature = torch.nn.Parameter(torch.tensor(1.0))
if mode in ("zero_rows", "two_gates", "far_gate"):
    opt = torch.optim.SGD(list(model.parameters()) + [temperature], lr=0.1)
entities = torch.nn.Parameter(torch.randn(50, 64))
relations = torch.nn.Parameter(torch.randn(4, 64))
if mode == "overflow_sum":
    opt = torch.optim.SGD(list(model.parameters()) + [entities, relations], lr=0.01)
classes = torch.nn.Parameter(torch.randn(4, 32))
if mode == "where_sqrt":
    opt = torch.optim.SGD(list(model.parameters()) + [classes], lr=0.1)
bn = torch.nn.BatchNorm1d(32)
# Made for their modes only: the other modes' random draws and call numbers stay as they were.
if mode == "grad_hook":
    critic = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    critic_opt = torch.optim.Adam(critic.parameters(), lr=0.01)
    lam = torch.ones(())
    critic[0].weight.register_hook(lambda grad: grad.div_(lam))  # GRADHOOK
if mode == "two_callers":
    class Scale(torch.nn.Module):
        def forward(self, h, s):
            return h / s  # TWOCALLERS
    scale = Scale()
if mode == "schedule":
    sched_b = torch.linspace(0, 1, 11).sqrt()  # b_0 = 0
    sched_a = (1 - sched_b ** 2).sqrt()
if mode == "cosine_gpt":
    gpt_emb = torch.nn.Embedding(50, 32)
    gpt_tokens = torch.randint(0, 50, (12, 8, 8))
    opt = torch.optim.SGD(list(model[2].parameters()) + list(gpt_emb.parameters()), lr=0.1)
if mode == "cosine_bn":
    opt = torch.optim.SGD(list(model.parameters()) + list(bn.parameters()), lr=0.1)
if mode.startswith("adam_") or mode.startswith("custom_bwd"):
    opt = torch.optim.Adam(list(model.parameters()) + list(bn.parameters()), lr=0.01)
if mode == "inf_row":
    opt = torch.optim.SGD(list(model.parameters()) + list(emb.parameters()) +
                          list(lstm.parameters()), lr=0.1)



class Reverse(torch.autograd.Function):
    """Identity forward; backward reverses the gradient, normalised by its norm."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return -g / g.norm()  # CUSTOMBWD


class Square(torch.autograd.Function):
    """x * x, whose backward computes 2 g x^2 / x (0/0 at zeros) and keeps it only where x is
    not 0: NaN made and removed out of place, in the backward pass."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = 2 * g * x * x / x
        return torch.where(x == 0, torch.zeros_like(t), t)


buf = torch.empty(4)
if mode == "busy_poison":  # long enough for the adapter to measure its rate (0.2 s windows)
    busy = torch.zeros(4)
    for _ in range(300000):
        busy = busy + 0.0
if mode == "busy_cat_poison":
    parts = [torch.full((4,), float(i)) for i in range(64)]
    for _ in range(20000):
        busy = torch.cat(parts)
for step in range(12 if mode == "adam_state3" else
                  7 if mode.startswith("custom_bwd") or mode == "grad_hook" else 4):
    opt.zero_grad()
    inputs = x
    if mode == "stale":
        buf.view(torch.int32).fill_(0x7FC00000)  # quiet-NaN bytes, made by no floating op
        first, last = buf[0], buf.as_strided((1,), (1,), 3)
        first.unsqueeze_(0)
        last.as_strided_((1, 1), (1, 1), 3)
        buf.zero_()
        inputs = x + buf.sum()
    if mode == "mask":
        seq = q_proj(inputs).view(8, 8, 16)
        scores = torch.baddbmm(mask, seq, seq.transpose(1, 2), alpha=0.25)
        inputs = (torch.softmax(scores, dim=-1) @ seq).reshape(64, 16)
    if mode == "busy_poison":  # many tiny ops a step, as recurrent and op-heavy models run
        for _ in range(3000):
            inputs = inputs + 0.0
    if mode == "busy_cat_poison":
        for _ in range(1500):
            busy = torch.cat(parts)
    if mode in ("poison", "busy_poison", "busy_cat_poison", "long_poison", "long_poison0"):
        h = model[0](inputs)
        shift = 10.0 if step == (0 if mode == "long_poison0" else 1) else 0.0
        out = model[2](model[1](h * torch.sqrt(h.var(0) - shift)))  # POISON
        if mode.startswith("long_poison"):
            z = x[0]
            for _ in range(5000):
                z = z + 0.0
    elif mode == "spectrum":
        h = model[0](inputs)
        h = h * torch.sqrt(h.var(0) - (10.0 if step == 1 else 0.0))  # SPECTRUM
        spec = torch.fft.rfft(h, dim=-1)
        out = model[2](model[1](torch.fft.irfft(spec * spec.conj(), n=32, dim=-1)))
    elif mode == "normaliser":
        out = model(inputs)
        e = out + (torch.full((4,), float("-inf")) if step == 1 else torch.zeros(4))
        llh = e[:, 0] - torch.logsumexp(e, dim=1)  # NORMALISER
    elif mode == "gru_h0":
        h0 = torch.zeros(4, 64, 16)
        if step == 1:
            h0[-1, :4] = torch.sqrt(h0[-1, :4] - 1.0)  # H0
        _, hn = gru(torch.nn.utils.rnn.pack_padded_sequence(sequence, lengths), h0)
        out = model(hn[-1])
    elif mode == "numpy_row":
        batch = torch.from_numpy(numpy.random.RandomState(step).randn(64, 16).astype("float32"))
        inputs = batch.clone()
        if step == 1:
            inputs[5] = torch.sqrt(batch[5] - 10.0) * 0 + batch[5]  # NUMPYROW
        del batch  # gone: what its rows held is unknown (held, it would say they were finite)
        out = model(inputs)
    elif mode == "zero_rows":
        h = model[0](inputs) * (torch.arange(64) >= 4).unsqueeze(1)
        penalty = 1e-3 * Square.apply(h).mean()  # before the gate: its backward runs after
        u = h / h.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        scale = 1e4 if step == 1 else 1e-3
        gate = 1.0 / (torch.exp(h.pow(2).sum(-1) * scale / temperature) + 1.0)  # ZEROROWS
        out = model[2](model[1](u)) * gate.unsqueeze(1) + penalty
    elif mode == "grad_hook":
        out = model(inputs)
        if step % 2 == 0:  # the critic steps every other iteration
            lam.fill_(max(0.0, 1.0 - step / 4.0))
            critic_opt.zero_grad()
            (critic(out.detach()).pow(2).mean() * lam).backward()
            critic_opt.step()
        out = out + critic(out).detach()
    elif mode == "schedule":
        t = torch.randint(1, 11, (64,))
        if step == 1:
            t[0] = 0
        x_t = sched_a[t, None] * inputs + sched_b[t, None] * torch.randn(64, 16)
        out = model((x_t - sched_a[t, None] * inputs) / sched_b[t, None])  # SCHEDULE
    elif mode == "two_callers":
        h = scale(model[0](inputs), 2.0)
        h = scale(h, torch.tensor(0.0 if step == 1 else 3.0))  # SECONDCALL
        out = model[2](model[1](h))
    elif mode == "zero_norm":
        v = torch.full((32, 16), 0.0 if step >= 1 else 1.0, requires_grad=True)
        w = v / v.norm()  # ZERONORM
        out = model[2](model[1](inputs @ w.t()))
    elif mode == "checkpoint":
        def segment(h):
            return h + torch.log(torch.sigmoid(h))  # CHECKPOINT
        h = model[0](inputs * (1e4 if step == 1 else 1.0))
        out = model[2](torch.utils.checkpoint.checkpoint(segment, h))
    elif mode == "sam":
        def cosine(keep):
            f = model[0](inputs) * keep
            f = f / torch.sqrt((f * f).sum(1, keepdim=True)).clamp_min(1e-6)  # SAM
            return torch.nn.functional.cross_entropy(model[2](model[1](f)), y)
        keep = (torch.arange(64) != (0 if step == 1 else -1)).unsqueeze(1).float()
        cosine(keep).backward()
        params = list(model.parameters())
        with torch.no_grad():
            norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
            climbed = [p.clone() for p in params]
            for p in params:
                p.add_(p.grad * (0.05 / (norm + 1e-12)))
        opt.zero_grad()
        out = model(inputs)  # the second pass, below; then back to where it climbed from
    elif mode == "cosine_gpt":
        h = gpt_emb(gpt_tokens[step].clone())  # a batch of the data: gone once the backward pass ran
        att = torch.matmul(h, h.transpose(1, 2)) * 0.2
        att = torch.softmax(att.masked_fill(torch.tril(torch.ones(8, 8)) == 0, float("-inf")), -1)
        f = torch.nn.functional.layer_norm(torch.matmul(att, h).reshape(64, 32), (32,))
        f = f * (torch.arange(64) != (0 if step == 1 else -1)).unsqueeze(1)
        f = f / torch.sqrt((f * f).sum(1, keepdim=True)).clamp_min(1e-6)  # COSINEGPT
        out = model[2](model[1](f))
    elif mode in ("cosine_bn", "cosine_ln"):
        norm = bn if mode == "cosine_bn" else torch.nn.functional.layer_norm
        f = norm(model[0](inputs)) if mode == "cosine_bn" else norm(model[0](inputs), (32,))
        f = f * (torch.arange(64) != (0 if step == 1 else -1)).unsqueeze(1)
        f = f / torch.sqrt((f * f).sum(1, keepdim=True)).clamp_min(1e-6)  # COSINE
        out = model[2](model[1](f))
    elif mode.startswith("custom_bwd"):
        h = bn(model[0](inputs)) if mode == "custom_bwd_bn" else model[0](inputs)
        out = model[2](model[1](h + (0.0 if step == 1 else 0.1) * Reverse.apply(h)))
    elif mode in ("isnan_guard", "isfinite_guard"):
        h = model[0](inputs)
        if step == 2:
            h = h * (torch.arange(32) != 5)
        d = h.t()
        h = (d / d.norm(dim=1, keepdim=True)).t()  # GUARDDIV
        if mode == "isnan_guard":
            if torch.isnan(h).any():  # GUARD
                raise RuntimeError("NaN in the features")
        else:
            assert torch.isfinite(h).all(), "NaN in the features"  # GUARDF
        out = model[2](model[1](h))
    elif mode == "nan_data":
        batch = inputs.clone()
        batch[step::7, step % 16] = float("nan")
        if torch.isnan(batch).any():
            batch = torch.nan_to_num(batch)
        out = model(batch)
    elif mode == "raise_empty":
        h = model[0](inputs)
        if step == 1:
            h = torch.sqrt(h - 100.0)  # RAISE
        bound = h[(h > -3) & (h < 3)].abs().max()
        out = model[2](model[1](h / bound))
    elif mode == "two_gates":
        h = model[0](inputs)
        scale = 1e4 if step == 1 else 1e-3
        pos, neg = (1.0 / (torch.exp(z.pow(2).sum(-1) * scale / temperature) + 1.0)  # TWOGATES
                    for z in (h[:32], h[32:]))
        out = model[2](model[1](h))
        loss_gates = (-torch.log(pos.clamp_min(1e-7)).mean() -
                      torch.log((1 - neg).clamp_min(1e-7)).mean())
    elif mode == "far_gate":
        h = model[0](inputs)
        d = h.pow(2).sum(-1) * (temperature * (1e4 if step == 1 else 1e-3))
        gate = 1.0 / (torch.exp((d - 2.0) / torch.tensor(0.5)) + 1.0)  # FARGATE
        out = model[2](model[1](h))
        loss_gates = -torch.log(gate.clamp_min(1e-7)).mean()
    elif mode == "where_sqrt":
        h = model[0](inputs)
        if step == 1:
            with torch.no_grad():
                classes.copy_(h[:4])  # IMPRINT
        cos = torch.nn.functional.normalize(h) @ torch.nn.functional.normalize(classes).t()
        s2 = 1 - cos * cos
        sine = torch.where(s2 > 0, torch.sqrt(s2), torch.zeros_like(s2))  # WHERESQRT
        out = 10 * (cos * 0.8776 - sine * 0.4794)
    elif mode == "inf_row":
        if step == 1:
            with torch.no_grad():
                emb.weight[tokens[0, 0], 3] = float("inf")  # INFROW
        features, _ = lstm(emb(tokens))
        out = model(features[:, -1])
    else:
        out = model(inputs)
    loss = torch.nn.functional.cross_entropy(out, y)  # LOSS
    if mode == "normaliser":
        loss = loss - llh.mean()
    if mode in ("two_gates", "far_gate"):
        loss = loss + loss_gates
    if mode == "overflow_sum":
        if step == 1:
            with torch.no_grad():
                entities.mul_(1e13)  # OVERFLOW
        pick = torch.arange(64) % 50
        re_h, im_h = entities[pick].chunk(2, dim=1)
        re_t, im_t = entities[(pick * 7) % 50].chunk(2, dim=1)
        re_r, im_r = relations[pick % 4].chunk(2, dim=1)
        loss = loss - torch.nn.functional.logsigmoid(  # the score's sum a temporary
            -((re_h * re_r - im_h * im_r) * re_t + (re_h * im_r + im_h * re_r) * im_t).sum(1)
        ).mean()
    if mode == "grad_of":
        w = out.abs().mean(0) * (0.0 if step == 1 else 1.0)
        loss = loss + 1e-3 * torch.log(w).sum()  # GRADOF
    if mode == "slice_write":
        w = torch.rand(64, 4) + 0.5
        if step == 1:
            w[37, 2] = 0.0
        target = torch.zeros(64, 4)
        for i in range(0, 64, 16):
            target[i:i + 16] = torch.log(w[i:i + 16])  # SLICE
        loss = loss + (out - target).abs().mean()
        with torch.no_grad():
            weighted = (target * 0.0).sum()  # NaN (0 * -inf) from the origin's -inf: its spread
    if mode == "masked_row":
        scores = model[0](inputs).sum(-1).view(8, 8)
        row0 = torch.arange(8).unsqueeze(1) == 0
        alpha = torch.softmax(scores.masked_fill(row0, float("-inf")) if step == 1 else scores,
                              dim=1)  # MASKED
        context = (inputs.view(8, 8, 16) * alpha.unsqueeze(2)).sum(1)
        decoded = torch.zeros(8, 4)
        for t in range(8):
            decoded[t] = model(context[t])
        loss = loss + torch.nn.functional.cross_entropy(decoded, y[:8])
    loss.backward()
    if mode == "sam":
        with torch.no_grad():
            for p, before in zip(model.parameters(), climbed):
                p.copy_(before)
    if mode in ("inf_row", "cosine_bn", "cosine_ln", "cosine_gpt"):
        torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], 5.0)
    if step == (3 if mode == "adam_state3" else 0) and mode.startswith("adam_state"):
        model[0].weight.grad.mul_(1e38)  # ADAMSTATE
    if step == 0 and mode == "adam_nan_grad":
        model[0].weight.grad[0, 0] = float("nan")  # ADAMNAN
    opt.step()
    if mode == "log0":
        with torch.no_grad():
            p = torch.relu(out.softmax(-1) - 0.3)
            logp = torch.log(p)  # ORIGIN
            entropy = (p * logp).sum()
    if mode == "oneoff":
        labels = torch.where(y == 3, 0, y) if step == 2 else y
        hits = ((out.argmax(-1) == 3) & (labels == 3)).sum()
        recall = hits / (labels == 3).sum()  # ONEOFF
        print(f"recall {recall.item():.3f}", file=sys.stderr)
    if mode == "oneoff2":
        labels = torch.where(y == 3, 0, y) if step == 2 else y
        hits = ((out.argmax(-1) == 3) & (labels == 3)).sum()
        recall = hits / (labels == 3).sum()  # ONEOFF2A
        predicted = torch.zeros_like(y) if step == 3 else out.argmax(-1)
        precision = ((predicted == 1) & (y == 1)).sum() / (predicted == 1).sum()  # ONEOFF2B
        print(f"recall {recall.item():.3f} precision {precision.item():.3f}", file=sys.stderr)
    if mode == "listinputs":
        with torch.no_grad():
            v = out[:2, 0].abs() + (1e30 if step == 2 else 1.0)
            score = torch.einsum("i,i->", v, v)  # LISTINPUTS
        print(f"score {score.item():.3g}", file=sys.stderr)
    if mode == "finite_checks":
        w = model[0].weight
        assert torch.isfinite(w).all() and not torch.isinf(x).any()
        assert bool(w.ne(float("inf")).all())
        print(loss.detach().reshape(1), file=sys.stderr)
    print(f"step {step} loss {loss.item():.9g}")
