#!/usr/bin/perl
# cu2cc.pl IN.cu OUT.cc — rewrites a CUDA source so the host C++ compiler builds it against the
# CPU emulation of CUDA (tests/cuemu; docs/cuda.md section 4): the two constructs that are not
# C++ become calls into the emulator, everything else is left to the shim headers.
#   name<<<grid, block[, smem[, stream]]>>>(args);  ->  { cuemu_check_args("name", args);
#                                                        cuemu_launch(&name, "name", [=]() { name(args); }, grid, block[, ...]); }
#   extern __shared__ T x[];                        ->  T *x = (T *)cuemu_dyn_smem();
# Line breaks are kept, and a #line directive names the original file, so diagnostics and
# assertion messages point at the .cu source.
use strict;
use warnings;
my ($in, $out) = @ARGV;
die "usage: cu2cc.pl IN.cu OUT.cc\n" unless defined $out;
open(my $fh, '<', $in) or die "cu2cc.pl: cannot read $in: $!\n";
my $s = do { local $/; <$fh> };
close $fh;
my $n_smem = ($s =~ s{extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;}{$1 *$2 = ($1 *)cuemu_dyn_smem();}g) || 0;
my $n_launch = ($s =~ s{(\w+)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;}{{ cuemu_check_args(CUEMU_STR($1), $3); cuemu_launch((const void *)&$1, CUEMU_STR($1), [=]() { $1($3); }, $2); }}gs) || 0;
die "cu2cc.pl: $in: a launch (<<<) was left unrewritten\n" if $s =~ /<<<|>>>/;
open(my $oh, '>', "$out.tmp") or die "cu2cc.pl: cannot write $out.tmp: $!\n";
print $oh "#line 1 \"$in\"\n", $s;
close $oh or die "cu2cc.pl: cannot write $out.tmp: $!\n";
rename("$out.tmp", $out) or die "cu2cc.pl: cannot rename $out.tmp: $!\n";
