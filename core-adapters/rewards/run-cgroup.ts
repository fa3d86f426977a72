// A control group per sandboxed run, where the host lets this process make one: memory (resident,
// /tmp's files, kernel memory) and processes bounded for the whole run rather than per process, and
// the run's CPU time read across all its processes. cgroup v2 (one hierarchy) or v1 (memory, pids
// and cpuacct hierarchies). Without one (no root, a container that delegates none) the sandbox keeps
// its per-process limits and says so.
import fs from 'node:fs';
import path from 'node:path';

const CGROUP_ROOT = '/sys/fs/cgroup';
/** The folder under which each run's group is made (next to this process's own group on v1). */
const PARENT = 'flowrl-sandbox';

export interface RunCgroupLimits {
  memoryBytes: number;
  processes: number;
}

/** One run's group: the bash in front of the command writes its pid into each of `procsFiles`. */
export interface RunCgroup {
  readonly procsFiles: string[];
  /** CPU seconds used so far by every process the run had. */
  cpuSeconds(): number;
  /** Whether the kernel killed a process of the run for its memory limit. */
  oomKilled(): boolean;
  /** Removes the group once its processes are gone (tries again for a moment while they are reaped). */
  remove(): Promise<void>;
}

/** The groups this machine lets a run have, or why none. */
export type RunCgroups = { version: 'v1' | 'v2'; create(limits: RunCgroupLimits): RunCgroup } | { version: undefined; why: string };

function write(file: string, value: string): void {
  fs.writeFileSync(file, value);
}

/** A named value of a flat-keyed cgroup file ("oom_kill 3"), 0 when absent. */
function keyed(file: string, key: string): number {
  try {
    const line = fs.readFileSync(file, 'utf8').split('\n').find((l) => l.startsWith(`${key} `));
    return line ? Number(line.slice(key.length + 1)) : 0;
  } catch {
    return 0;
  }
}

let runs = 0;
function runName(): string {
  return `run-${process.pid}-${runs++}`;
}

async function removeDirs(dirs: string[]): Promise<void> {
  for (const dir of dirs) {
    for (let attempt = 0; ; attempt++) {
      try {
        fs.rmdirSync(dir);
        break;
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        // EBUSY: a process of the run not yet reaped; after 2 s the group is left for the next sweep.
        if (code !== 'EBUSY' || attempt >= 40) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  }
}

/** Removes groups left by runs of processes that no longer exist (a trainer killed mid-run). */
function sweep(parents: string[]): void {
  for (const parent of parents) {
    for (const name of fs.readdirSync(parent)) {
      const owner = /^run-(\d+)-\d+$/.exec(name)?.[1];
      if (!owner || Number(owner) === process.pid || fs.existsSync(`/proc/${owner}`)) continue;
      try {
        fs.rmdirSync(path.join(parent, name));
      } catch {
        // Still in use, or not ours to remove.
      }
    }
  }
}

function cgroupV2(root: string): RunCgroups {
  const parent = path.join(root, PARENT);
  fs.mkdirSync(parent, { recursive: true });
  // The root group takes no part in the no-internal-processes rule; below it the controllers must be passed down.
  // With the cpu controller where the host delegates it: each run then weighs the same whatever its
  // process count (a fork chain does not starve a one-process run); without it, CFS shares by process.
  for (const controllers of ['+memory +pids +cpu', '+memory +pids']) {
    try {
      write(path.join(root, 'cgroup.subtree_control'), controllers);
      write(path.join(parent, 'cgroup.subtree_control'), controllers);
      break;
    } catch (e) {
      if (!controllers.includes('cpu')) throw e;
    }
  }
  sweep([parent]);
  return {
    version: 'v2',
    create(limits) {
      const dir = path.join(parent, runName());
      fs.mkdirSync(dir);
      try {
        write(path.join(dir, 'memory.max'), String(limits.memoryBytes));
        if (fs.existsSync(path.join(dir, 'memory.swap.max'))) write(path.join(dir, 'memory.swap.max'), '0');
        write(path.join(dir, 'pids.max'), String(limits.processes));
      } catch (e) {
        fs.rmdirSync(dir);
        throw e;
      }
      return {
        procsFiles: [path.join(dir, 'cgroup.procs')],
        cpuSeconds: () => keyed(path.join(dir, 'cpu.stat'), 'usage_usec') / 1e6,
        oomKilled: () => keyed(path.join(dir, 'memory.events'), 'oom_kill') > 0,
        remove: () => removeDirs([dir]),
      };
    },
  };
}

/** This process's own group in each v1 hierarchy, from /proc/self/cgroup ("4:memory:/a/b"). */
function ownV1Paths(): Map<string, string> {
  const own = new Map<string, string>();
  for (const line of fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const [, controllers, where] = line.split(':');
    for (const controller of controllers?.split(',') ?? []) if (controller) own.set(controller, where);
  }
  return own;
}

function cgroupV1(root: string): RunCgroups {
  const own = ownV1Paths();
  const parents: Record<'memory' | 'pids' | 'cpuacct', string> = { memory: '', pids: '', cpuacct: '' };
  for (const controller of Object.keys(parents) as (keyof typeof parents)[]) {
    const mount = path.join(root, controller);
    if (!fs.existsSync(path.join(mount, 'cgroup.procs'))) throw new Error(`no ${controller} hierarchy at ${mount}`);
    // Under this process's own group, so whatever bounds the trainer (a container) bounds its runs too.
    parents[controller] = path.join(mount, own.get(controller) ?? '/', PARENT);
    fs.mkdirSync(parents[controller], { recursive: true });
  }
  // The cpu hierarchy, where it is mounted apart from cpuacct: a group there makes each run weigh the
  // same (cpu.shares 1024) whatever its process count, so a fork chain does not starve a one-process
  // run; without it CFS shares the CPU per process. Where the two are mounted together, the cpuacct
  // group is already in it.
  const cpuMount = path.join(root, 'cpu');
  const shares =
    fs.existsSync(path.join(cpuMount, 'cgroup.procs')) && fs.realpathSync(cpuMount) !== fs.realpathSync(path.join(root, 'cpuacct')) ? path.join(cpuMount, own.get('cpu') ?? '/', PARENT) : undefined;
  if (shares) fs.mkdirSync(shares, { recursive: true });
  sweep([...Object.values(parents), ...(shares ? [shares] : [])]);
  return {
    version: 'v1',
    create(limits) {
      const name = runName();
      const dirs = [...Object.values(parents), ...(shares ? [shares] : [])].map((p) => path.join(p, name));
      const [memory, pids, cpu] = dirs;
      try {
        for (const dir of dirs) fs.mkdirSync(dir);
        write(path.join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
        // With swap accounting, memory and swap together: no run swaps the machine.
        if (fs.existsSync(path.join(memory, 'memory.memsw.limit_in_bytes'))) write(path.join(memory, 'memory.memsw.limit_in_bytes'), String(limits.memoryBytes));
        // v1 counts TCP buffers only once they have a limit of their own (v2 counts them in memory.max).
        if (fs.existsSync(path.join(memory, 'memory.kmem.tcp.limit_in_bytes'))) write(path.join(memory, 'memory.kmem.tcp.limit_in_bytes'), String(limits.memoryBytes));
        write(path.join(pids, 'pids.max'), String(limits.processes));
      } catch (e) {
        for (const dir of dirs) if (fs.existsSync(dir)) fs.rmdirSync(dir);
        throw e;
      }
      return {
        procsFiles: dirs.map((d) => path.join(d, 'cgroup.procs')),
        cpuSeconds: () => {
          try {
            return Number(fs.readFileSync(path.join(cpu, 'cpuacct.usage'), 'utf8')) / 1e9;
          } catch {
            return 0;
          }
        },
        oomKilled: () => keyed(path.join(memory, 'memory.oom_control'), 'oom_kill') > 0,
        remove: () => removeDirs(dirs),
      };
    },
  };
}

/**
 * The run groups this process can make under `root`: v2 when it is one hierarchy, else v1; as
 * root only (making and joining a group needs write access to it and to where the process comes
 * from). `FLOWRL_SANDBOX_CGROUP=off` turns them off (tests of the per-process bounds use it).
 */
export function findRunCgroups(root = CGROUP_ROOT, env: NodeJS.ProcessEnv = process.env): RunCgroups {
  if (env.FLOWRL_SANDBOX_CGROUP === 'off') return { version: undefined, why: 'FLOWRL_SANDBOX_CGROUP=off' };
  if (process.getuid?.() !== 0) return { version: undefined, why: 'not running as root' };
  try {
    const groups = fs.existsSync(path.join(root, 'cgroup.controllers')) ? cgroupV2(root) : cgroupV1(root);
    // One trial group, so a host that lets the folder be made but not limited says so now.
    if (groups.version) void groups.create({ memoryBytes: 64 << 20, processes: 1 }).remove();
    return groups;
  } catch (e) {
    return { version: undefined, why: (e as Error).message };
  }
}
