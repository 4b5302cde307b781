"""The QEMU backend, the machine only: the microvm and its arguments, QMP, the status port,
the job archive init runs, the accelerator probe and VM templates (disks and boot assets
are vm/disks/ and vm/assets/, shared by any backend)."""
