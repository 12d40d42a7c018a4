# What the container's seccomp filter must refuse, tried as the container's
# processes would: a static x86-64 program of its own ELF header, no libc.
# It writes the kernel's answers to stdout, one line each: the errno, or 0
# when the call worked.
#
#   fchmodat2 N   fchmodat2(fd, "", 04755, AT_EMPTY_PATH) on an unnamed file
#                 it made in its working directory (open(".", O_TMPFILE))
#   file N        instead, when it could not make that file
#   openat2 N     openat2(AT_FDCWD, ".", {O_TMPFILE|O_RDWR, 04755}, 24)
#
# Build: as --64 -o c.o set_id_check.s && objcopy -O binary -j .text c.o c.bin
        .intel_syntax noprefix
        .set BASE, 0x400000
        .text
ehdr:   .byte 0x7f, 'E', 'L', 'F', 2, 1, 1, 0       # ELF64, little-endian, v1, System V
        .quad 0
        .word 2                                     # ET_EXEC
        .word 0x3e                                  # x86-64
        .long 1
        .quad BASE + (_start - ehdr)                # entry
        .quad phdr - ehdr                           # program headers
        .quad 0                                     # no section headers
        .long 0
        .word 64, 56, 2, 0, 0, 0                    # sizes, 2 program headers
phdr:   .long 1, 5                                  # PT_LOAD, read + execute
        .quad 0, BASE, BASE, end - ehdr, end - ehdr, 0x1000
        .long 0x6474e551, 6                         # PT_GNU_STACK, read + write
        .quad 0, 0, 0, 0, 0, 16

_start: mov     edi, -100                           # AT_FDCWD
        lea     rsi, [rip + dot]
        mov     edx, 0x410002                       # O_TMPFILE | O_RDWR
        mov     r10d, 0600
        mov     eax, 257                            # openat
        syscall
        test    rax, rax
        js      nofile
        mov     rdi, rax
        lea     rsi, [rip + empty]
        mov     edx, 04755                          # S_ISUID | 0755
        mov     r10d, 0x1000                        # AT_EMPTY_PATH
        mov     eax, 452                            # fchmodat2
        syscall
        lea     rsi, [rip + fchmodat2]
        mov     edx, 10
        call    report
        jmp     second
nofile: lea     rsi, [rip + file]
        mov     edx, 5
        call    report
second: mov     edi, -100                           # AT_FDCWD
        lea     rsi, [rip + dot]
        lea     rdx, [rip + how]
        mov     r10d, 24                            # sizeof(struct open_how)
        mov     eax, 437                            # openat2
        syscall
        lea     rsi, [rip + openat2]
        mov     edx, 8
        call    report
        xor     edi, edi
        mov     eax, 231                            # exit_group(0)
        syscall

# Writes rsi (rdx bytes), then the errno of answer rax (0 when rax >= 0) in
# decimal and a newline.
report: push    rax
        mov     edi, 1
        mov     eax, 1                              # write(1, rsi, rdx)
        syscall
        pop     rax
        neg     rax
        jg      1f
        xor     eax, eax
1:      lea     rsi, [rsp - 8]                      # digits, backwards, below the stack
        mov     byte ptr [rsi], 10
        mov     ecx, 10
2:      xor     edx, edx
        div     rcx
        add     dl, '0'
        dec     rsi
        mov     [rsi], dl
        test    rax, rax
        jnz     2b
        lea     rdx, [rsp - 7]
        sub     rdx, rsi
        mov     edi, 1
        mov     eax, 1                              # write(1, rsi, rdx)
        syscall
        ret

dot:       .asciz "."
empty:     .byte 0
fchmodat2: .ascii "fchmodat2 "
file:      .ascii "file "
openat2:   .ascii "openat2 "
        .balign 8
how:    .quad 0x410002, 04755, 0                    # flags, mode, resolve
end:
