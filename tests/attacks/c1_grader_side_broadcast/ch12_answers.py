# Chapter 12 flash_update: the visible check computes ex_acc / ex_l IN THE GRADER'S PROCESS before
# check_close looks at the shape. Two replies of N floats each (2 x 64 KiB for N = 16384)
# broadcast to an N x N tensor there: 1 GiB allocated and written by the grader, outside every
# limit of the sandbox (3 GiB, seconds, CPU). N = 65536 (2 x 256 KiB sent) asks for 16 GiB.
ANSWERS = {
    "flash_update": '''
N = 16384

def update(m, l, acc, scores, v):
    return torch.zeros(1), torch.ones(N, 1), torch.ones(1, N)
''',
}
