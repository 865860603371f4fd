/* loader_thunk.S — call a function so that it sees a chosen return address.
 *
 * void* fumi_call_with_return_address(const char* file, int mode, void* fn, const void* ret)
 * calls fn(file, mode) with `ret` as its return address; `ret` must be the address of a `ret`
 * instruction (byte 0xC3), which then returns here. glibc's dlopen resolves RUNPATH/$ORIGIN
 * relative to the object containing its return address; fumi's dlopen wrapper passes a `ret`
 * found inside its own caller's object, so the loader sees the real caller (interposer/loader.cpp).
 * x86-64 System V only. */
#if defined(__x86_64__)
    .text
    .globl  fumi_call_with_return_address
    .hidden fumi_call_with_return_address
    .type   fumi_call_with_return_address, @function
fumi_call_with_return_address:
    .cfi_startproc
    pushq   %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq    %rsp, %rbp
    .cfi_def_cfa_register %rbp
    andq    $-16, %rsp          /* rsp % 16 == 0 */
    subq    $8, %rsp            /* rsp % 16 == 8 */
    leaq    1f(%rip), %rax
    pushq   %rax                /* where the `ret` gadget returns to; rsp % 16 == 0 */
    pushq   %rcx                /* fn's return address: the gadget; rsp % 16 == 8 as at a call */
    jmp     *%rdx
1:
    movq    %rbp, %rsp
    popq    %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size   fumi_call_with_return_address, .-fumi_call_with_return_address
#endif
    .section .note.GNU-stack,"",@progbits
