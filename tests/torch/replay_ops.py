"""A small training step whose ops cover what `fumi replay` must rebuild from a PyTorch case:
convolutions forward and backward (bool lists, optional sizes), batch norm in training mode
(running statistics written in place, three outputs), an LSTM (tensor lists in and out),
softmax's backward (a dtype argument), in-place and out= forms, a concatenation, a product
under bf16 autocast, and ops with integer tensors (embedding, cross entropy, whose backward
gets an undefined tensor for its optional weight). Prints the results as hex floats."""
import torch


def main():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(20, 8)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)
    bn = torch.nn.BatchNorm2d(4)
    lstm = torch.nn.LSTM(8, 6, batch_first=True)
    head = torch.nn.Linear(4 * 4 * 4 + 6, 5)
    x = torch.randn(3, 3, 8, 8)
    tokens = torch.randint(0, 20, (3, 5))
    target = torch.tensor([1, 3, 0])

    h = torch.relu(bn(conv(x)))
    h = torch.nn.functional.max_pool2d(h, 2).flatten(1)
    seq, _ = lstm(emb(tokens))
    z = torch.cat([h, seq[:, -1]], dim=1)
    logits = head(z)
    probs = torch.softmax(logits, dim=1)
    loss = torch.nn.functional.cross_entropy(logits, target) + probs.square().mean()
    loss.backward()

    with torch.no_grad():
        acc = torch.ones(5)
        acc.add_(probs.sum(dim=0), alpha=0.5)  # in place
        out = torch.empty(5)
        torch.sum(probs, dim=0, out=out)  # out=
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cast = torch.nn.functional.linear(z, head.weight)
    print(loss.item().hex(), acc.sum().item().hex(), out.sum().item().hex(),
          cast.float().sum().item().hex())


if __name__ == "__main__":
    main()
