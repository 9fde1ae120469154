# frozen_string_literal: true

require "socket"
require "json"

# A small HTTP/1.1 server on loopback for the tests (the standard library
# has none since Ruby 3.0): each connection serves one request and
# closes. The handler gets (method, path, headers (lower-case names),
# body) and returns [status, headers, body], or writes the response to
# the socket itself and returns nil (for streams).
class LocalHTTP
  attr_reader :port, :requests

  def initialize(&handler)
    @server = TCPServer.new("127.0.0.1", 0)
    @port = @server.addr[1]
    @handler = handler
    @requests = Queue.new
    @thread = Thread.new do
      loop do
        conn = @server.accept
        Thread.new(conn) { |c| serve(c) }
      end
    rescue IOError, Errno::EBADF
      nil
    end
  end

  def url(path = "/") = "http://127.0.0.1:#{@port}#{path}"

  def stop
    @server.close
    @thread.join(1)
  end

  # Every request served so far: [method, path, headers, body].
  def seen
    out = []
    out << @requests.pop until @requests.empty?
    out.each { @requests << _1 }
    out
  end

  private

  def serve(conn)
    line = conn.gets or return
    method, path, = line.split
    headers = {}
    while (h = conn.gets) && h != "\r\n"
      k, v = h.split(":", 2)
      headers[k.strip.downcase] = v.to_s.strip
    end
    body = conn.read(headers["content-length"].to_i).to_s
    @requests << [method, path, headers, body]
    out = @handler.call(conn, method, path, headers, body)
    return unless out

    status, hdrs, resp = out
    head = "HTTP/1.1 #{status} X\r\nContent-Length: #{resp.bytesize}\r\nConnection: close\r\n"
    hdrs.each { |k, v| head << "#{k}: #{v}\r\n" }
    conn.write(head, "\r\n", resp)
  rescue IOError, SystemCallError
    nil
  ensure
    conn.close
  end
end
