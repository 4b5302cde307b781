#!/bin/busybox sh
# PID 1 of the guest. Runs as root, sets up the mounts the host described, runs each step
# UNPRIVILEGED in a chroot of the assembled root, and reports each step's exit status on
# the status port. The host trusts only what arrives on that port, so:
#  - the status port's device node exists only in this initramfs /dev (root, 0600), never
#    in the chroot the command runs in, and it is opened per message and closed again, so
#    no descriptor to it is ever inherited by a step;
#  - a step's stdout/stderr ports are opened for that step only, by this script;
#  - /job (the per-run description) is root-only and each step's file is removed once read;
#  - the command runs with no_new_privs (setuid bits and file capabilities are ignored),
#    under uid/gid RUN_UID with no supplementary groups and hence no capabilities, and
#    every process of that uid is killed after each step.
# Messages on the status port: "uptime init=S modules=S ready=S" (the guest's clock when
# init started, when its modules were loaded, when the mounts were done), "ready",
# "start I", "oom I N" (the kernel's OOM killer killed N processes during step I: the
# only evidence an exit by SIGKILL was for memory), "exit I RC TIMEDOUT", "clock EPOCH"
# (the guest's clock once the steps are done), "done", "error TEXT", and in a template
# "template-ready" when it waits for its job. The serial console carries only kernel
# messages and the canary marker.
PATH=/bin
export PATH
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /run /newroot
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount -t devtmpfs -o nosuid,noexec devtmpfs /dev
chmod 0700 /job
umask 022  # directories made for mounts must be traversable by the guest user

if [ -e /job/canary ]; then
    echo ROTEIRO-CANARY-OK > /dev/ttyS0
    poweroff -f
fi

read T_INIT _ < /proc/uptime
for m in $(cat /etc/modules.load); do insmod "/lib/modules/$m" || echo "insmod $m failed" > /dev/ttyS0; done
read T_MODULES _ < /proc/uptime

# port_dev and blk_dev set DEV rather than print it: under TCG every fork costs tens of
# milliseconds, and `$(...)` around a `$(cat ...)` per device was two of them per lookup.
port_dev() {
    for p in /sys/class/virtio-ports/*; do
        name=
        read -r name < "$p/name" 2>/dev/null
        if [ "$name" = "$1" ]; then DEV="/dev/${p##*/}"; return 0; fi
    done
    return 1
}
n=0
while [ -z "$STATUS" ] && [ $n -lt 200 ]; do port_dev status && STATUS=$DEV; n=$((n + 1)); [ -n "$STATUS" ] || usleep 10000; done
status() { echo "$*" > "$STATUS"; }
fail() { status "error $*"; sync; poweroff -f; sleep 10; }
[ -n "$STATUS" ] || { echo "no status port" > /dev/ttyS0; poweroff -f; }

blk_dev() {
    n=0
    while [ $n -lt 200 ]; do
        for b in /sys/block/vd*; do
            serial=
            read -r serial < "$b/serial" 2>/dev/null
            if [ "$serial" = "$1" ]; then DEV="/dev/${b##*/}"; return 0; fi
        done
        n=$((n + 1)); usleep 10000
    done
    return 1
}

R=/newroot
plain_path() {  # guest-path: fail unless $R$1 is reached without following a symbolic link
    [ "$(realpath "$R$1" 2>/dev/null)" = "$R$1" ] || fail "path $1 passes through a symbolic link in the image"
}
plain_dir() {  # guest-path: a mount point inside the new root, never one a link sends elsewhere
    mkdir -p "$R$1" || fail "cannot make mount point $1"
    plain_path "$1"
}
mount_root() {
    blk_dev "$1" || fail "no root disk $1"
    dev=$DEV
    mkdir -p /ro /rw
    mount -t ext4 -o ro,noload "$dev" /ro || fail "cannot mount the root filesystem"
    mount -t tmpfs -o mode=0755 tmpfs /rw
    mkdir -p /rw/upper /rw/work
    mount -t overlay -o lowerdir=/ro,upperdir=/rw/upper,workdir=/rw/work,nosuid,nodev overlay $R \
        || fail "cannot assemble the root overlay"
    mkdir -p $R/proc $R/sys $R/dev $R/tmp
    for d in /proc /sys /dev /tmp; do plain_path "$d"; done  # an image's `tmp -> /` would mount over init's root
    mount -t proc -o nosuid,nodev,noexec proc $R/proc
    mount -t sysfs -o ro,nosuid,nodev,noexec sysfs $R/sys
    mount -t tmpfs -o mode=0755,nosuid,noexec tmpfs $R/dev
    for d in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
        IFS=: read name maj min <<DEV
$d
DEV
        mknod -m 0666 "$R/dev/$name" c "$maj" "$min"
    done
    ln -s /proc/self/fd $R/dev/fd
    ln -s /proc/self/fd/0 $R/dev/stdin
    ln -s /proc/self/fd/1 $R/dev/stdout
    ln -s /proc/self/fd/2 $R/dev/stderr
    mkdir -p $R/dev/shm
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs $R/dev/shm
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs $R/tmp
}
mount_share() {  # tag guest-path cache-mode: read-only 9p; the host qemu also refuses writes
    plain_dir "$2"
    mount -t 9p -o "ro,nosuid,nodev,trans=virtio,version=9p2000.L,msize=512000,cache=$3" "$1" "$R$2" \
        || fail "cannot mount share $1"
}
mount_image() {  # serial guest-path: a read-only ext4 image of a host tree (readonly=on in qemu)
    blk_dev "$1" || fail "no share disk $1"
    dev=$DEV
    plain_dir "$2"
    mount -t ext4 -o ro,noload,nosuid,nodev "$dev" "$R$2" || fail "cannot mount share disk $1"
}
mount_scratch() {  # serial guest-path: the only writable disk
    blk_dev "$1" || fail "no scratch disk $1"
    dev=$DEV
    plain_dir "$2"
    mount -t ext4 -o nosuid,nodev "$dev" "$R$2" || fail "cannot mount the scratch disk"
    SCRATCH="$R$2"
}
mount_depcache() {  # serial guest-path: the dependency cache under the scratch's target dir
    # The cache (roteiro_py/depcache/) is a read-only ext4 image another VM wrote while
    # building only the pinned dependencies; it is the lower layer of an overlay whose
    # upper is on this run's scratch, so cargo finds the dependencies fresh and whatever
    # this run writes (the tree's build scripts included) lands on the scratch, never in
    # the cache. The image is mounted in init's own namespace, outside the chroot.
    [ -n "$SCRATCH" ] || fail "a dependency cache needs the scratch disk"
    blk_dev "$1" || fail "no dependency cache disk $1"
    dev=$DEV
    mkdir -p /depcache
    mount -t ext4 -o ro,noload,nosuid,nodev "$dev" /depcache || fail "cannot mount the dependency cache"
    # The cache was written by the dependencies' code: a `target` that is a link would
    # send the lower layer anywhere in init's root.
    [ -d /depcache/target ] && [ "$(realpath /depcache/target 2>/dev/null)" = /depcache/target ] \
        || fail "the dependency cache holds no plain target directory"
    for d in "$SCRATCH/.deps-upper" "$SCRATCH/.deps-work"; do
        mkdir -p "$d" && [ "$(realpath "$d" 2>/dev/null)" = "$d" ] || fail "cannot make $d on the scratch"
    done
    chown "$RUN_UID:$RUN_GID" "$SCRATCH/.deps-upper"
    plain_dir "$2"
    mount -t overlay -o "lowerdir=/depcache/target,upperdir=$SCRATCH/.deps-upper,workdir=$SCRATCH/.deps-work,nosuid,nodev" \
        overlay "$R$2" || fail "cannot layer the dependency cache under $2"
    DEPS_AT="$R$2"
}
mount_trees() {  # guest-path: the tmpfs every tree share is mounted under (vm/mounts.py
    # GUEST_TREES). Its directories are made here, root-owned and 0755 (umask 022), so
    # the guest user reaches every tree whatever the image's own directories are: its
    # /root is 0700, and a tree mounted at its host path under it was unreachable.
    plain_dir "$1"
    mount -t tmpfs -o "mode=0755,nosuid,nodev" tmpfs "$R$1" || fail "cannot mount $1"
}
mount_tmpfs_owned() {  # guest-path: a tmpfs the unprivileged user owns (e.g. CARGO_HOME)
    plain_dir "$1"
    mount -t tmpfs -o "mode=0755,uid=$RUN_UID,gid=$RUN_GID,nosuid,nodev" tmpfs "$R$1"
}

sweep() {
    nsenter -F -S "$RUN_UID" -G "$RUN_GID" -- /bin/busybox kill -KILL -1 2>/dev/null
}

oom_kills() {  # the kernel's count of OOM kills since boot (/proc/vmstat oom_kill), or 0
    OOM=0
    while read -r oom_key oom_value; do
        [ "$oom_key" = oom_kill ] && OOM=$oom_value
    done < /proc/vmstat
}

run_steps() {  # first: steps first..NSTEPS-1, each reported on the status port
    i=$1
    while [ $i -lt "$NSTEPS" ]; do
        STEP_TIMEOUT=
        STEP_CWD=
        . "/job/step$i"
        rm -f "/job/step$i"
        # nsenter opens the working directory before it chroots: a link in the image on the
        # way to it would put the command's cwd outside the new root.
        plain_path "$STEP_CWD"
        port_dev "stdout$i" || fail "no stdout port for step $i"
        out=$DEV
        port_dev "stderr$i" || fail "no stderr port for step $i"
        err=$DEV
        oom_kills
        oom_before=$OOM
        status "start $i"
        /bin/busybox env -i "$@" </dev/null >"$out" 2>"$err" &
        pid=$!
        ( sleep "$STEP_TIMEOUT"; : > "/run/timeout$i"; kill -KILL $pid 2>/dev/null ) &
        wd=$!
        wait $pid
        rc=$?
        kill -KILL $wd 2>/dev/null
        sweep
        to=0
        [ -e "/run/timeout$i" ] && to=1
        oom_kills
        [ "$OOM" -gt "$oom_before" ] 2>/dev/null && status "oom $i $((OOM - oom_before))"
        status "exit $i $rc $to"
        i=$((i + 1))
        if [ $rc -ne 0 ] && [ "$STOP_ON_FAILURE" = 1 ]; then return 1; fi
    done
}

. /job/config
# CLOCK (epoch seconds) first: every dep-info the build writes must be newer than every
# stamp of the worktree's copy (vm/stamps.py). A template's own job has none; each clone
# sets the one its job carries below.
[ -z "$CLOCK" ] || date -u -s "@$CLOCK" >/dev/null || fail "cannot set the clock to $CLOCK"
. /job/mounts
rm -f /job/config /job/mounts
read T_READY _ < /proc/uptime
status "uptime init=$T_INIT modules=$T_MODULES ready=$T_READY"

if [ -e /job/template ]; then
    # A template (template.py): the root is assembled and the template steps (the
    # toolchain probes) ran; now wait for a job on the job port. The host saves this
    # machine here and restores copies of it, each resuming in the `read` below.
    rm -f /job/template
    run_steps 0 || fail "a template step failed"
    sweep
    # What the template steps left in /tmp (clippy/command.py: cargo's rustc info cache
    # and the image's sysroot, which every step of every clone reads) becomes root's and
    # read-only before the template is saved: no step of a clone, the tree's build
    # scripts included, can alter it, and with /tmp's sticky bit none can remove or
    # rename an entry it does not own. busybox's -R follows no link; a link itself is
    # given to root, never followed.
    for f in "$R"/tmp/* "$R"/tmp/.[!.]* "$R"/tmp/..?*; do
        if [ -L "$f" ]; then chown -h 0:0 "$f" || fail "cannot seal ${f#"$R"}"
        elif [ -e "$f" ]; then chown -R 0:0 "$f" && chmod -R go-w "$f" || fail "cannot seal ${f#"$R"}"
        fi
    done
    port_dev job || fail "no job port"
    status template-ready
    LEN=
    { read -r LEN; case $LEN in ''|*[!0-9]*) LEN=0;; esac; head -c "$LEN" > /run/job.cpio; } < "$DEV"
    # A job cut short has no trailer: cpio fails on it ("short read").
    [ "$LEN" -gt 0 ] && (cd / && cpio -i -d -u < /run/job.cpio 2>/dev/null) || fail "the job arrived cut short"
    . /job/config
    # Every clone shares the template's clock and RNG state: set the one from the host,
    # reseed the other from host entropy (writing to /dev/urandom only mixes the pool on
    # Linux 6.1; the RNDRESEEDCRNG ioctl makes the next read use it).
    date -u -s "@$CLOCK" >/dev/null || fail "cannot set the clock"
    cat /job/seed > /dev/urandom || fail "cannot mix the host's entropy"
    /bin/roteiro-reseed < /dev/urandom || fail "cannot reseed the RNG"
    rm -f /run/job.cpio /job/config /job/seed
    # The per-run disks are new files under the template's device slots: drop whatever
    # the guest cached of the placeholders it probed at boot.
    for b in /sys/block/vd*; do
        serial=
        read -r serial < "$b/serial" 2>/dev/null
        [ "$serial" = "$ROOT_SERIAL" ] && continue
        blockdev --flushbufs "/dev/${b##*/}" || fail "cannot flush ${b##*/}"
    done
    . /job/mounts
    rm -f /job/mounts
fi

read T_READY _ < /proc/uptime
status ready
run_steps "${FIRST:-0}"
sweep
sync
[ -z "$DEPS_AT" ] || umount "$DEPS_AT" 2>/dev/null || umount -l "$DEPS_AT" 2>/dev/null
if [ -n "$SCRATCH" ]; then umount "$SCRATCH" 2>/dev/null || mount -o remount,ro "$SCRATCH"; fi
status "clock $(date +%s)"
status done
poweroff -f
