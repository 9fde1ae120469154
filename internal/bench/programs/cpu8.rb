# A small 8-bit CPU interpreter in the manner of a NES emulator's core
# (what Optcarrot spends its time on): 64 KiB of memory, A/X/Y, carry and
# zero/negative flags, a fetch-decode-execute loop dispatching on the
# opcode byte. The program mixes two 256-byte tables n times; the result
# is a checksum of the first table and the instructions executed.
class Cpu8
  LDA_IMM = 0xA9; LDX_IMM = 0xA2; LDY_IMM = 0xA0; LDA_ABX = 0xBD; STA_ABX = 0x9D
  ADC_ABX = 0x7D; EOR_IMM = 0x49; INX = 0xE8; DEY = 0x88; BNE = 0xD0; CLC = 0x18
  HLT = 0x02

  attr_reader :mem, :steps

  def initialize
    @mem = Array.new(0x10000, 0)
    @a = @x = @y = 0
    @carry = 0
    @nz = 0 # the last result: zero flag when 0, negative flag when bit 7 set
    @pc = 0x0200
    @steps = 0
  end

  def load(addr, bytes) = bytes.each_with_index { |b, i| @mem[addr + i] = b }

  def fetch
    b = @mem[@pc]
    @pc = (@pc + 1) & 0xFFFF
    b
  end

  def fetch16 = fetch | (fetch << 8)

  def run
    mem = @mem
    loop do
      @steps += 1
      case fetch
      when LDA_IMM then @nz = @a = fetch
      when LDX_IMM then @nz = @x = fetch
      when LDY_IMM then @nz = @y = fetch
      when LDA_ABX then @nz = @a = mem[(fetch16 + @x) & 0xFFFF]
      when STA_ABX then mem[(fetch16 + @x) & 0xFFFF] = @a
      when ADC_ABX
        s = @a + mem[(fetch16 + @x) & 0xFFFF] + @carry
        @carry = s >> 8
        @nz = @a = s & 0xFF
      when EOR_IMM then @nz = @a ^= fetch
      when INX then @nz = @x = (@x + 1) & 0xFF
      when DEY then @nz = @y = (@y - 1) & 0xFF
      when CLC then @carry = 0
      when BNE
        off = fetch
        @pc = (@pc + (off < 0x80 ? off : off - 0x100)) & 0xFFFF if @nz != 0
      when HLT then return
      else raise "bad opcode at #{@pc - 1}"
      end
    end
  end
end

def bench(n)
  cpu = Cpu8.new
  256.times { |i| cpu.mem[0x1000 + i] = i; cpu.mem[0x1100 + i] = (i * 7) & 0xFF }
  outer = 0x0202
  inner = 0x0205
  cpu.load(0x0200, [
    Cpu8::LDY_IMM, n & 0xFF,                  # 0200: LDY #n
    Cpu8::LDX_IMM, 0,                         # 0202: LDX #0
    Cpu8::CLC,                                # 0204: CLC
    Cpu8::LDA_ABX, 0x00, 0x10,                # 0205: LDA $1000,X
    Cpu8::ADC_ABX, 0x00, 0x11,                # 0208: ADC $1100,X
    Cpu8::EOR_IMM, 0x5A,                      # 020B: EOR #$5A
    Cpu8::STA_ABX, 0x00, 0x10,                # 020D: STA $1000,X
    Cpu8::INX,                                # 0210: INX
    Cpu8::BNE, (inner - 0x0213) & 0xFF,       # 0211: BNE inner
    Cpu8::DEY,                                # 0213: DEY
    Cpu8::BNE, (outer - 0x0216) & 0xFF,       # 0214: BNE outer
    Cpu8::HLT                                 # 0216
  ])
  cpu.run
  cpu.mem[0x1000, 256].each_with_index.sum { |b, i| b * (i + 1) } * 10_000_000 + cpu.steps
end
