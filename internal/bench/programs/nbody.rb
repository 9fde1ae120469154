# n-body: five bodies (the Sun and the four gas giants) moved by
# symplectic Euler steps of 0.01 years, as in the Computer Language
# Benchmarks Game's task; the result is the system's energy after n steps.
NB_SOLAR_MASS = 4 * Math::PI**2
NB_DAYS_PER_YEAR = 365.24

class NBody
  attr_accessor :x, :y, :z, :vx, :vy, :vz, :mass

  def initialize(x, y, z, vx, vy, vz, mass)
    @x, @y, @z = x, y, z
    @vx, @vy, @vz = vx * NB_DAYS_PER_YEAR, vy * NB_DAYS_PER_YEAR, vz * NB_DAYS_PER_YEAR
    @mass = mass * NB_SOLAR_MASS
  end
end

def nb_system
  bodies = [
    NBody.new(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0),
    NBody.new(4.84143144246472090e+00, -1.16032004402742839e+00, -1.03622044471123109e-01,
              1.66007664274403694e-03, 7.69901118419740425e-03, -6.90460016972063023e-05, 9.54791938424326609e-04),
    NBody.new(8.34336671824457987e+00, 4.12479856412430479e+00, -4.03523417114321381e-01,
              -2.76742510726862411e-03, 4.99852801234917238e-03, 2.30417297573763929e-05, 2.85885980666130812e-04),
    NBody.new(1.28943695621391310e+01, -1.51111514016986312e+01, -2.23307578892655734e-01,
              2.96460137564761618e-03, 2.37847173959480950e-03, -2.96589568540237556e-05, 4.36624404335156298e-05),
    NBody.new(1.53796971148509165e+01, -2.59193146099879641e+01, 1.79258772950371181e-01,
              2.68067772490389322e-03, 1.62824170038242295e-03, -9.51592254519715870e-05, 5.15138902046611451e-05)
  ]
  px = py = pz = 0.0
  bodies.each { |b| px += b.vx * b.mass; py += b.vy * b.mass; pz += b.vz * b.mass }
  sun = bodies[0]
  sun.vx, sun.vy, sun.vz = -px / NB_SOLAR_MASS, -py / NB_SOLAR_MASS, -pz / NB_SOLAR_MASS
  bodies
end

def nb_advance(bodies, dt)
  n = bodies.size
  i = 0
  while i < n
    b = bodies[i]
    j = i + 1
    while j < n
      b2 = bodies[j]
      dx = b.x - b2.x
      dy = b.y - b2.y
      dz = b.z - b2.z
      d2 = dx * dx + dy * dy + dz * dz
      mag = dt / (d2 * Math.sqrt(d2))
      bm = b.mass * mag
      b2m = b2.mass * mag
      b.vx -= dx * b2m
      b.vy -= dy * b2m
      b.vz -= dz * b2m
      b2.vx += dx * bm
      b2.vy += dy * bm
      b2.vz += dz * bm
      j += 1
    end
    i += 1
  end
  bodies.each do |b|
    b.x += dt * b.vx
    b.y += dt * b.vy
    b.z += dt * b.vz
  end
end

def nb_energy(bodies)
  e = 0.0
  bodies.each_with_index do |b, i|
    e += 0.5 * b.mass * (b.vx * b.vx + b.vy * b.vy + b.vz * b.vz)
    bodies[(i + 1)..].each do |b2|
      dx = b.x - b2.x
      dy = b.y - b2.y
      dz = b.z - b2.z
      e -= b.mass * b2.mass / Math.sqrt(dx * dx + dy * dy + dz * dz)
    end
  end
  e
end

def bench(n)
  bodies = nb_system
  n.times { nb_advance(bodies, 0.01) }
  nb_energy(bodies).round(9)
end
