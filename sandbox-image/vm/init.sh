#!/bin/sh
# PID 1 of the kubecua desktop VM (kernel argument init=/opt/kubecua/vm/init).
# 1. the kernel's filesystems, 2. the network (DHCP; qemu's 10.0.2.15 when nobody answers),
# 3. per-VM settings from the config drive: a filesystem labelled cidata (iso9660 as KubeVirt's
#    cloudInitNoCloud volume makes it, ext4 as kubecua_episode.vm makes it) whose user-data holds
#    KEY=VALUE lines, 4. the desktop session and server on :5000 under supervisord (which also
#    reaps orphans as PID 1).
# Settings read from user-data (others are ignored; values are never evaluated as shell):
#   KUBECUA_SANDBOX_TOKEN   the bearer token of the desktop server (required: without it the
#                           server serves loopback clients only, i.e. nobody outside the VM)
#   KUBECUA_SCREEN          WIDTHxHEIGHT of the display (default 1920x1080)
#   KUBECUA_HOSTNAME        the guest's hostname (default kubecua-vm)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
log() { echo "kubecua-vm-init: $*" >/dev/console; }

mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777,nosuid,nodev shm /dev/shm
mount -t tmpfs -o mode=755,nosuid,nodev run /run
mount -o remount,rw /
install -d -o user -g user -m 0700 /run/user/1000
install -d -m 0755 /run/kubecua
ip link set lo up

# Settings.
token="" screen=1920x1080 host=kubecua-vm
for m in isofs vfat nls_cp437 nls_iso8859_1 nls_utf8; do modprobe -q "$m"; done
seed=$(blkid -L cidata 2>/dev/null || blkid -L CIDATA 2>/dev/null || true)
if [ -n "$seed" ]; then
  mkdir -p /run/kubecua/seed && mount -o ro "$seed" /run/kubecua/seed
  if [ -f /run/kubecua/seed/user-data ]; then
    while IFS= read -r line || [ -n "$line" ]; do
      case $line in
        KUBECUA_SANDBOX_TOKEN=*) token=${line#*=} ;;
        KUBECUA_SCREEN=*) screen=${line#*=} ;;
        KUBECUA_HOSTNAME=*) host=${line#*=} ;;
      esac
    done < /run/kubecua/seed/user-data
  fi
  umount /run/kubecua/seed
else
  log "no config drive (label cidata): the desktop server will serve loopback clients only"
fi
case $screen in
  [0-9]*x[0-9]*) width=${screen%x*} height=${screen#*x} ;;
  *) log "KUBECUA_SCREEN=$screen is not WIDTHxHEIGHT; using 1920x1080"; width=1920 height=1080 ;;
esac
hostname "$host"
printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$host" > /etc/hosts
if [ -n "$token" ]; then
  (umask 077 && printf '%s' "$token" > /run/kubecua/token) && chown user:user /run/kubecua/token
  auth="--token-file /run/kubecua/token"
else
  auth=""
fi

# Network: DHCP on the first ethernet device, else qemu user networking's fixed address. No udev
# here: load the driver and take the kernel's name for the device.
modprobe -q virtio_net
dev=""
for i in $(seq 50); do
  dev=$(ls /sys/class/net | grep -v '^lo$' | head -n1)
  [ -n "$dev" ] && break
  sleep 0.1
done
if [ -z "$dev" ]; then
  log "no network device"
else
  ip link set "$dev" up
  if ! timeout 15 dhclient -4 -1 -q "$dev"; then
    log "no DHCP answer on $dev; using 10.0.2.15/24 via 10.0.2.2"
    ip addr add 10.0.2.15/24 dev "$dev" && ip route add default via 10.0.2.2
    echo 'nameserver 10.0.2.3' > /etc/resolv.conf
  fi
  log "network: $(ip -4 -o addr show dev "$dev" | awk '{print $4}') on $dev"
fi
rm -rf /tmp/.X*-lock /tmp/.X11-unix
log "starting the desktop (${width}x${height}) on :5000"
export KUBECUA_VM_WIDTH="$width" KUBECUA_VM_HEIGHT="$height" KUBECUA_VM_AUTH="$auth"
exec /usr/bin/supervisord -c /etc/kubecua/vm-supervisord.conf
